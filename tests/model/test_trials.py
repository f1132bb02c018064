"""Trial planning: kernel lookup, validation messages, expansion, dedup, and the kernel source hash."""
import functools
import sys
import textwrap

import pytest

from triton_sweep.model.trial import ConfigError

from triton_sweep.model.spec_sources import kernel_source_hash, load_spec

from triton_sweep.model.space import plan_trials

SOFTMAX = {"shapes": [[4, 1000]], "dtypes": ["float16"],
           "space": {"BLOCK_SIZE": [1024, 2048], "num_warps": [4]}}


def test_unknown_kernel_name_and_bad_import_path():
    with pytest.raises(ConfigError,
                       match="kernel.name: unknown kernel 'nope'; known: attention, .*softmax, .*external"):
        load_spec("nope", None)
    with pytest.raises(ConfigError, match="kernel.spec: cannot import 'no_such_module'"):
        load_spec("external", "no_such_module:SPEC")
    with pytest.raises(ConfigError, match="is not a triton_sweep.kernels.spec.KernelSpec"):
        load_spec("external", "triton_sweep.kernels.softmax:softmax")
    # A name the module lacks is said to be missing, with the KernelSpecs it has (not "got NoneType").
    missing = (r"^kernel.spec: module 'tests.fixtures.external_kernel' has no attribute 'SPECS' "
               r"\(its KernelSpecs: SPEC\)$")
    with pytest.raises(ConfigError, match=missing):
        load_spec("external", "tests.fixtures.external_kernel:SPECS")
    with pytest.raises(ConfigError, match="module 'triton_sweep.kernels.spec' has no attribute 'SPEC' "
                                          r"\(its KernelSpecs: none\)"):
        load_spec("external", "triton_sweep.kernels.spec:SPEC")


def test_lists_expand_and_duplicates_collapse():
    spec = load_spec("softmax", None)
    trials = plan_trials(spec, {**SOFTMAX, "shapes": [[4, 1000], [4, 1000]], "dtypes": ["float16", "float16"],
                                "space": {"BLOCK_SIZE": [1024, 1024, 2048], "num_warps": [4, 4]}}, "cuda")
    assert [(t.provider, t.config.get("BLOCK_SIZE")) for t in trials] == [
        ("triton", 1024), ("triton", 2048), ("eager", None), ("torch", None), ("compile", None)]
    assert len({t.key for t in trials}) == len(trials)


def test_the_interpreter_leaves_the_torch_compile_baseline_out_unless_named(capsys):
    """On the interpreter, torch.compile's timings (inductor's CPU code) say nothing and its compile takes
    most of a small sweep: kernel.baselines=null leaves it out, in one line naming how to have it."""
    spec = load_spec("softmax", None)
    providers = lambda trials: [t.provider for t in trials if t.provider != "triton"]
    assert providers(plan_trials(spec, SOFTMAX, "interpret")) == ["eager", "torch"]
    assert capsys.readouterr().out == (
        "kernel.baselines: compile (torch.compile) left out on the interpreter, where its timings mean "
        "nothing; kernel.baselines=[eager,torch,compile] times it\n")
    named = plan_trials(spec, {**SOFTMAX, "baselines": ["torch", "compile"]}, "interpret")
    assert providers(named) == ["torch", "compile"] and capsys.readouterr().out == ""
    assert providers(plan_trials(spec, SOFTMAX, "cuda")) == ["eager", "torch", "compile"]


def test_a_shape_of_a_2d_kernel_may_be_given_alone():
    spec = load_spec("softmax", None)
    one = plan_trials(spec, {**SOFTMAX, "shapes": [4, 1000]}, "cuda")  # one job of -m kernel.shapes=...
    listed = plan_trials(spec, SOFTMAX, "cuda")
    assert [t.key for t in one] == [t.key for t in listed]


def test_pruned_configs_carry_their_reason():
    spec = load_spec("softmax", None)
    trials = plan_trials(spec, {**SOFTMAX, "space": {"BLOCK_SIZE": [512, 1024]}, "baselines": []}, "cuda")
    reasons = {t.config["BLOCK_SIZE"]: t.pruned_reason for t in trials if t.config["num_warps"] == 1}
    assert reasons == {512: "BLOCK_SIZE 512 < row length 1000: one program must hold a whole row", 1024: None}


def test_interpreter_refuses_large_shapes():
    with pytest.raises(ConfigError, match="backend=interpret runs every program in Python"):
        plan_trials(load_spec("softmax", None), {**SOFTMAX, "shapes": [[4096, 4096]]}, "interpret")


def test_source_hash_covers_modules_the_launcher_reaches(tmp_path, monkeypatch):
    package = tmp_path / "hashpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "inner.py").write_text("VALUE = 1\n")
    (package / "outer.py").write_text(textwrap.dedent("""
        import dataclasses
        from hashpkg import inner
        from triton_sweep.kernels import vector_add
        def launch(inputs, out, config, extra=None):
            vector_add.SPEC.launch(inputs, out, config)
        SPEC = dataclasses.replace(vector_add.SPEC, name="hashed", launch=launch)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import hashpkg.outer

    before = kernel_source_hash(hashpkg.outer.SPEC)
    partial_spec = hashpkg.outer.SPEC.__class__(**{**vars(hashpkg.outer.SPEC),
                                                   "launch": functools.partial(hashpkg.outer.launch)})
    assert kernel_source_hash(partial_spec) == before  # a partial hashes its function's module
    (package / "inner.py").write_text("VALUE = 2\n")  # a module the launcher's module imports
    sys.modules.pop("hashpkg.inner")
    import hashpkg.inner

    monkeypatch.setattr(hashpkg.outer, "inner", hashpkg.inner)
    assert kernel_source_hash(hashpkg.outer.SPEC) != before
