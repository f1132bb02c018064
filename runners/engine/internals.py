"""The parts of Triton's and torch's internals the sweep leans on, each behind a check, with the plain
path where a release renamed or removed one:
- `triton.runtime.driver.set_active` with a driver object of ours, and `JITFunction.run` wrapped to pass
  `warmup=True` (CompileOnly, for runners/engine/compile_pool.py): a config's binary built for the GPU's
  target in a process with no CUDA context. Missing (compile_only_problem): no compile pool, each GPU
  worker compiles a config in its first call.
- `torch._inductor.compile_fx.compile_fx` as torch.compile's backend (kernels/spec.py: compiled.prepare,
  checked there, since kernels/ imports nothing of runners/): a torch.compile baseline compiled ahead,
  nothing launched. Missing: the baseline compiles in its first call, under its GPU's lock.
- `torch.cuda._sleep` (runners/measure/cuda_timer.py, cupti_records.py, runners/export/lookup.py): a spin
  on the GPU that holds back the calls enqueued behind it; part of the timer, and not behind a check (no
  public call does it)."""
from __future__ import annotations

from typing import Optional


def compile_only_problem() -> Optional[str]:
    """Why this Triton cannot compile without a GPU as compile_only does; None where it can."""
    try:
        from triton.backends.compiler import GPUTarget  # noqa: F401  (CompileOnly.set_target's)
        from triton.runtime import driver
        from triton.runtime.jit import JITFunction
    except ImportError as error:
        return f"ImportError: {error}"
    for where, owner, name in (("triton.runtime.driver", driver, "set_active"),
                               ("JITFunction", JITFunction, "run")):
        if not callable(getattr(owner, name, None)):
            return f"this Triton has no {where}.{name}"
    return None


class _CompileOnlyDriver:
    """The part of Triton's driver interface that JITFunction.run(warmup=True) uses: a device index,
    a stream and the compile target. Each target gets a device index of its own: a JITFunction keeps
    its compiled kernels per device index, so a second target under the same index would be answered
    with the first target's kernels."""

    def __init__(self, target, device: int):
        self._target, self._device = target, device

    def get_current_device(self):
        return self._device

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return self._target


class CompileOnly:
    """In this process (a compile worker's, which never launches), every @triton.jit launch becomes a
    compile for the target last set; `compiled` holds the kernels of the launches since it was cleared."""

    def __init__(self):
        from triton.runtime.jit import JITFunction

        launch = JITFunction.run
        self.compiled: list = []
        self._target, self._devices = None, {}

        def compile_only(function, *args, grid, warmup, **kwargs):
            kernel = launch(function, *args, grid=grid, warmup=True, **kwargs)
            self.compiled.append(kernel)
            return kernel

        JITFunction.run = compile_only

    def set_target(self, target: tuple) -> None:
        """Compile for `target` ((backend, arch, warp size), as the GPU workers report it) from now on."""
        from triton.backends.compiler import GPUTarget
        from triton.runtime import driver

        if target != self._target:
            driver.set_active(_CompileOnlyDriver(GPUTarget(*target), self._devices.setdefault(target,
                                                                                         len(self._devices))))
            self._target = target
