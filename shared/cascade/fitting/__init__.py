"""Fitting and validating the calibration on measured data (``cascade calibrate``,
``cascade validate``): the measured data sets, the held-out and shifted-shape protocols, the
fit itself and its reports. Writes :mod:`cascade.calibration`'s ``default.json``; nothing at
prediction time imports this package.
"""
