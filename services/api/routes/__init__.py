"""api route modules, listed in :data:`services.api.app.ROUTES`.

Each module defines ``routes = web.RouteTableDef()`` and decorates its handlers with it (plus
:func:`services.api.http.doc` for OpenAPI details), and optionally a sync ``setup(app)``. See
``health.py`` for an example.
"""
