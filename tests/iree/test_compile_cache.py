"""`whilst.compile` in stages, its compile cache and `Compiled.save`. Hits and misses
are counted by the calls to iree-compile (the real one, wrapped to count)."""
import os

import numpy as np
import pytest

import whilst
import whilst._cache
import whilst._compile
from whilst.runtime import load

pytestmark = pytest.mark.iree


def step(x, n):
    return whilst.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, x + 1.0), [0, x])


@pytest.fixture
def iree_compile_calls(monkeypatch):
    calls = []
    real = whilst._compile.compile_module

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(whilst._compile, "compile_module", counting)
    return calls


def test_second_compile_hits_the_cache_and_a_changed_flag_misses(tmp_path, iree_compile_calls):
    args = (np.zeros(2, np.float32), np.int32(0))
    seen = []
    first = whilst.compile(step, *args, cache=tmp_path,
                           progress=lambda label, seconds, done: done and seen.append(
                               (label, seconds)))
    assert [label for label, _ in first.stages] == [
        "export main to StableHLO", "prepare for IREE (1 function)",
        "iree-compile for llvm-cpu (host) with aggressive fusion, small loops in one dispatch "
        "each"]
    assert seen == first.stages and all(seconds >= 0 for _, seconds in seen)
    second = whilst.compile(step, *args, cache=tmp_path)
    assert len(iree_compile_calls) == 1 and second.cache_hit and not first.cache_hit
    assert second.data == first.data
    n, x = load(second.data).main(np.array([1.0, 2.0], np.float32), 3)
    assert int(n) == 3 and list(x) == [4.0, 5.0]
    third = whilst.compile(step, *args, cache=tmp_path, cpu="generic")
    assert len(iree_compile_calls) == 2 and not third.cache_hit
    assert len(os.listdir(tmp_path)) == 4   # two modules, each with its text


def test_an_entry_made_by_other_lowering_code_is_not_used(tmp_path, monkeypatch,
                                                           iree_compile_calls):
    """The key holds a digest of `whilst.lowering`'s code, which derives the form each
    flag set compiles (loops moved into dispatches): a whilst whose lowering differs
    compiles anew."""
    args = (np.zeros(2, np.float32), np.int32(0))
    whilst.compile(step, *args, cache=tmp_path)
    assert whilst.compile(step, *args, cache=tmp_path).cache_hit
    monkeypatch.setattr(whilst._cache, "lowering_digest", lambda: "other lowering code")
    again = whilst.compile(step, *args, cache=tmp_path)
    assert not again.cache_hit and len(iree_compile_calls) == 2
    assert len(os.listdir(tmp_path)) == 4


def test_a_corrupted_cache_entry_is_recompiled_never_loaded(tmp_path, iree_compile_calls):
    args = (np.zeros(2, np.float32), np.int32(0))
    good = whilst.compile(step, *args, cache=tmp_path).data
    (entry,) = tmp_path.glob("*.vmfb")
    damaged = bytearray(good)
    damaged[len(damaged) // 2] ^= 4
    for broken in (bytes(damaged), good[:-40]):
        entry.write_bytes(broken)
        again = whilst.compile(step, *args, cache=tmp_path)
        assert not again.cache_hit and again.data == good
        assert entry.read_bytes() == good        # replaced by the fresh module
    assert len(iree_compile_calls) == 3


def test_a_module_failing_with_aggressive_fusion_compiles_without_it_and_is_cached(
        tmp_path, monkeypatch, iree_compile_calls):
    """The fallback of `compile_module`: a flag set iree-compile rejects (here the
    aggressive one, given an unknown flag) is followed by the default one; the
    stage label says so and the entry is cached under the flags that worked."""
    from whilst.lowering import _iree

    real = _iree.compile_flags

    def failing_when_aggressive(*args, aggressive_fusion=False, **kwargs):
        flags = real(*args, aggressive_fusion=aggressive_fusion, **kwargs)
        return flags + ["--no-such-flag"] if aggressive_fusion else flags

    monkeypatch.setattr(_iree, "compile_flags", failing_when_aggressive)
    args = (np.zeros(2, np.float32), np.int32(0))
    first = whilst.compile(step, *args, cache=tmp_path)
    assert first.stages[-1][0].startswith(
        "iree-compile for llvm-cpu (host) with default fusion (with aggressive fusion, small "
        "loops in one dispatch each, iree-compile failed: iree-compile: Unknown command line "
        "argument '--no-such-flag'.")
    assert "; with aggressive fusion, iree-compile failed: iree-compile: Unknown" in (
        first.stages[-1][0])
    n, x = load(first.data).main(np.array([1.0, 2.0], np.float32), 3)
    assert int(n) == 3 and list(x) == [4.0, 5.0]
    plain = next(f for f in _iree.flag_sets(("llvm-cpu",)) if not _iree.has_aggressive_fusion(f))
    entry = whilst._cache.key(first_text(tmp_path, args), plain)
    assert sorted(os.listdir(tmp_path)) == [entry + ".txt", entry + ".vmfb"]
    second = whilst.compile(step, *args, cache=tmp_path)
    assert second.cache_hit and second.data == first.data and len(iree_compile_calls) == 1
    # the hit says what the compile said
    assert second.stages[-1][0] == "compile cache hit" + first.stages[-1][0][len("iree-compile"):]
    # an entry whose text is gone says only that it was made by a fallback
    os.remove(tmp_path / (entry + ".txt"))
    third = whilst.compile(step, *args, cache=tmp_path)
    assert third.cache_hit and third.data == first.data and len(iree_compile_calls) == 1
    assert third.stages[-1][0] == (
        "compile cache hit for llvm-cpu (host) with default fusion (cached when aggressive "
        "fusion failed; cache=False or --no-cache compiles it again and says why)")


def first_text(tmp_path, args):
    """The prepared module text `whilst.compile(step, *args)` compiles."""
    from whilst._compile import prepare_stage
    return prepare_stage([whilst.export(step, *args)], ("llvm-cpu",))


@pytest.mark.parametrize("targets", [("llvm-cpu",), ("llvm-cpu", "cuda"), ("cuda",),
                                     ("llvm-cpu", "rocm")])
def test_modules_compile_with_aggressive_fusion_first(targets):
    from whilst.lowering import flag_sets
    from whilst.lowering._iree import LOOPS_IN_DISPATCH

    *in_dispatch, fused, plain, unhoisted = flag_sets(targets)
    # a module for llvm-cpu, cuda or both tries its small loops inside dispatches first
    assert in_dispatch == ([[*fused, *LOOPS_IN_DISPATCH]] if "rocm" not in targets else [])
    assert flag_sets(targets, loops_in_dispatch=False) == [fused, plain, unhoisted]
    assert "--iree-dispatch-creation-enable-aggressive-fusion=true" in fused
    assert "--iree-dispatch-creation-enable-aggressive-fusion=false" in plain
    # last, without const-expr hoisting (iree_limits/hoisted_nested_loop.py)
    assert unhoisted == [*plain, "--iree-opt-const-expr-hoisting=false"]


@pytest.mark.parametrize("targets", [("vulkan-spirv",), ("llvm-cpu", "vulkan-spirv")])
def test_vulkan_modules_compile_with_default_fusion_only(targets):
    # IREE 3.13's aggressive fusion miscomputes gradients from the int32 booleans
    # Vulkan modules carry (iree_limits/aggressive_fusion_int32_booleans.py).
    from whilst.lowering import flag_sets

    plain, unhoisted = flag_sets(targets)
    assert "--iree-dispatch-creation-enable-aggressive-fusion=false" in plain
    assert unhoisted == [*plain, "--iree-opt-const-expr-hoisting=false"]


def test_cache_can_be_disabled(tmp_path, monkeypatch, iree_compile_calls):
    args = (np.zeros(2, np.float32), np.int32(0))
    monkeypatch.setenv("WHILST_CACHE_DIR", str(tmp_path))
    whilst.compile(step, *args, cache=False)
    monkeypatch.setenv("WHILST_CACHE_DIR", "off")
    whilst.compile(step, *args)
    assert len(iree_compile_calls) == 2 and not os.listdir(tmp_path)


def test_save_never_overwrites_or_follows_a_link(tmp_path):
    compiled = whilst.compile(step, np.zeros(2, np.float32), np.int32(0))
    (tmp_path / "victim").write_bytes(b"precious")
    os.symlink(tmp_path / "victim", tmp_path / "m.vmfb")
    with pytest.raises(FileExistsError, match="pass overwrite=True"):
        compiled.save(tmp_path / "m.vmfb")
    compiled.save(tmp_path / "m.vmfb", overwrite=True)
    assert (tmp_path / "victim").read_bytes() == b"precious"
    assert not os.path.islink(tmp_path / "m.vmfb")
    assert (tmp_path / "m.vmfb").read_bytes() == compiled.data
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".whilst-")] == []


def test_names_must_be_identifiers():
    with pytest.raises(ValueError, match="name must be a Python identifier"):
        whilst.compile(step, np.zeros(2, np.float32), np.int32(0), name="../x")


def test_a_module_for_cuda_and_vulkan_says_its_cuda_code_has_default_fusion(tmp_path):
    """iree-compile's fusion flag holds for every target of a module, and modules with a
    vulkan-spirv target are compiled without aggressive fusion: the stage label says
    what that costs cuda, where a module for cuda alone is compiled with it."""
    from whilst._compile import SHARED_FUSION_NOTE
    from whilst.lowering import _iree

    args = (np.zeros(2, np.float32), np.int32(0))
    both = whilst.compile(step, *args, target=["llvm-cpu", "cuda", "vulkan-spirv"],
                          cache=tmp_path)
    assert both.stages[-1][0].endswith(SHARED_FUSION_NOTE), both.stages
    n, x = load(both.data).main(np.array([1.0, 2.0], np.float32), 3)
    assert int(n) == 3 and list(x) == [4.0, 5.0]
    aggressive = f"{_iree.AGGRESSIVE_FUSION}=true"
    assert aggressive in _iree.flag_sets(("llvm-cpu", "cuda"))[0]
    assert all(aggressive not in flags
               for flags in _iree.flag_sets(("llvm-cpu", "cuda", "vulkan-spirv")))
