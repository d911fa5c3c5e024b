"""Running Accel-Sim for real: what is configured, the trace on disk, the subprocess.

- :func:`discover` (:mod:`.discovery`) reads ``CASCADE_ACCELSIM_BIN`` (``accel-sim.out``) and
  ``CASCADE_ACCELSIM_CONFIGS`` (an Accel-Sim checkout, whose
  ``gpu-simulator/gpgpu-sim/configs/tested-cfgs`` and ``gpu-simulator/configs/tested-cfgs``
  are merged per config name as Accel-Sim's run scripts merge them, or any folder of config
  folders) into an :class:`AccelSimSetup` (:mod:`.configs`): which Accel-Sim config serves which
  Cascade GPU (:mod:`cascade.gpus.accelsim_names`: by chip, then architecture;
  ``CASCADE_ACCELSIM_CONFIG_MAP``), and why not: config folders that serve no GPU are listed once
  with why. The binary counts as available once it has started (:func:`probe_binary`) with
  GPGPU-Sim's ``libcudart.so`` folder first on LD_LIBRARY_PATH
  (``CASCADE_ACCELSIM_LD_LIBRARY_PATH``, else found in the checkout as ``setup_environment.sh``
  would put it: :func:`library_path`, :mod:`.library`); every run gets that path too.
  :func:`require` refuses a run that cannot (``ValidationError`` naming the setting).
- :func:`fetch_instruction_trace` (:mod:`.tracefetch`, the only module that reads storage) puts a
  trace's instruction files (``kernel-N.traceg``, decompressed, and ``kernelslist.g``,
  :mod:`.tracefiles`) into a per-node cache, once per trace (a file lock serialises simulators on
  one node; a marker says the copy is complete).
- :func:`run_accelsim` (:mod:`.process`) links every file of the config folder into a fresh
  working directory (:func:`stage_config`: ``-inter_config_file config_*_islip.icnt`` and other
  includes are opened relative to it) and runs ``accel-sim.out -trace .../kernelslist.g -config
  gpgpusim.config -config trace.config`` there in its own process group, reads stdout as it is
  written and calls ``on_kernel`` for every finished kernel; cancellation (of the awaiting task)
  and the timeout kill the whole process group; a non-zero exit, a binary that could not start
  and an exit 0 that simulated nothing (``unsupported binary version: 0``) raise
  :class:`AccelSimError` with Accel-Sim's last lines (:func:`failure_message`, :mod:`.failures`).

Accel-Sim itself is built outside this repository
(https://github.com/accel-sim/accel-sim-framework#accel-sim-framework).
"""

from cascade.platform.accelsim.configs import (
    BIN_VAR,
    CONFIGS_VAR,
    MAP_VAR,
    MODEL,
    AccelSimGPUConfig,
    AccelSimServing,
    AccelSimSetup,
    stage_config,
)
from cascade.platform.accelsim.discovery import (
    discover,
    discover_from,
    discover_with,
    probe_binary,
    require,
)
from cascade.platform.accelsim.failures import failure_message
from cascade.platform.accelsim.library import LIBRARY_VAR, library_path
from cascade.platform.accelsim.process import (
    AccelSimOutcome,
    accelsim_argv,
    clean_workdir,
    run_accelsim,
    run_accelsim_blocking,
    simulate,
)
from cascade.platform.accelsim.tracefetch import (
    InstructionTrace,
    fetch_instruction_trace,
    trace_cache_dir,
)
from cascade.platform.accelsim.tracefiles import refuse_timeline_trace

__all__ = [
    "BIN_VAR",
    "CONFIGS_VAR",
    "LIBRARY_VAR",
    "MAP_VAR",
    "MODEL",
    "AccelSimGPUConfig",
    "AccelSimOutcome",
    "AccelSimServing",
    "AccelSimSetup",
    "InstructionTrace",
    "accelsim_argv",
    "clean_workdir",
    "discover",
    "discover_from",
    "discover_with",
    "failure_message",
    "fetch_instruction_trace",
    "library_path",
    "probe_binary",
    "refuse_timeline_trace",
    "require",
    "run_accelsim",
    "run_accelsim_blocking",
    "simulate",
    "stage_config",
    "trace_cache_dir",
]
