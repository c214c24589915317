"""Damaged modules give a LoadError, never a crash, a traceback or wrong numbers:
the seal (including damage to its own marker), the CRC-32s of unsealed modules,
validated metadata, and a byte-flip fuzz over sealed and unsealed modules."""
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import whilst
from helpers import REPO
from whilst.lowering import compile_text, prepare
from whilst.runtime import LoadError, describe, load
from whilst.runtime.seal import SEAL_LEN, SEAL_MAGIC, is_sealed, unseal
from whilst.runtime.signature import validate

pytestmark = pytest.mark.iree


def doubling(n, x):
    return whilst.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, x * 2.0 + 1.0), [0, x])


def reference(n, x):
    for _ in range(n):
        x = x * 2.0 + 1.0
    return n, x


@pytest.fixture(scope="module")
def sealed():
    return whilst.compile(doubling, np.int32(0), np.ones(3, np.float32)).data


def flip(data: bytes, *bits: int) -> bytes:
    d = bytearray(data)
    for b in bits:
        d[b // 8] ^= 1 << (b % 8)
    return bytes(d)


def test_one_flipped_bit_in_the_seal_marker_is_not_mistaken_for_no_seal(sealed):
    marker = (len(sealed) - SEAL_LEN) * 8
    for bit in (marker, marker + 8 * 5 + 3, marker + 127):
        damaged = flip(sealed, bit)
        assert is_sealed(damaged)
        with pytest.raises(LoadError, match="the module is corrupted"):
            load(damaged)
        # ... and so one more flipped bit in the body is caught as well
        with pytest.raises(LoadError, match="the module is corrupted"):
            load(flip(damaged, 8 * (len(sealed) // 2)))


def test_a_seal_marker_damaged_past_recognition_is_not_taken_for_no_seal(sealed):
    """A burst that flips every bit of the marker: the module no longer looks sealed,
    and the bytes after its archive give the damage away (the body itself is intact)."""
    marker = (len(sealed) - SEAL_LEN) * 8
    damaged = flip(sealed, *range(marker, marker + 128))
    assert not is_sealed(damaged)
    with pytest.raises(LoadError, match=r"48 bytes follow the end of its archive"):
        load(damaged)


@pytest.mark.parametrize("cut", [1, 5, 32])
def test_a_truncated_seal_is_detected(sealed, cut):
    with pytest.raises(LoadError):
        load(sealed[:-cut])


def test_marker_detection_has_margin_against_plain_modules(sealed):
    """Zero padding (the likeliest tail) is 52 bits from the marker; damage of up to
    24 bits is recognised as a damaged seal."""
    assert not is_sealed(unseal(sealed)) and not is_sealed(b"\0" * 200)
    marker = (len(sealed) - SEAL_LEN) * 8
    assert is_sealed(flip(sealed, *range(marker, marker + 24 * 5, 5)))
    assert SEAL_MAGIC in sealed[-SEAL_LEN:]


def test_unsealed_module_crcs_catch_a_flipped_bit(sealed):
    plain = unseal(sealed)
    np.testing.assert_array_equal(load(plain).main(3, np.ones(3, np.float32))[1],
                                  reference(3, np.ones(3, np.float32))[1])
    elf = plain.index(b"\x7fELF")
    for offset in (100, elf + 1000, len(plain) - 30_000):   # flatbuffer, machine code
        with pytest.raises(LoadError, match="corrupted"):
            load(flip(plain, 8 * offset + 2))


def _module_with_reflection(value: str) -> bytes:
    """An unsealed module whose whilst metadata is `value` (compiled by iree-compile)."""
    from whilst.lowering._iree_ir import ir

    text = prepare([whilst.export(doubling, np.int32(0), np.ones(3, np.float32))])
    with ir.Context():
        module = ir.Module.parse(text)
        for op in module.body.operations:
            if "iree.reflection" in op.attributes:
                op.attributes["iree.reflection"] = ir.DictAttr.get(
                    {"whilst": ir.StringAttr.get(value)})
        return compile_text(module.operation.get_asm())


@pytest.mark.parametrize("value, message", [
    ('{"name": "main", "inputs"', "Expecting"),
    ('{"name": "main"}', "the signature has no 'inputs'"),
])
def test_broken_metadata_of_an_unsealed_module_is_a_load_error(value, message):
    data = _module_with_reflection(value)
    for read in (load, describe):
        with pytest.raises(LoadError) as e:
            read(data)
        assert "the whilst metadata of function 'main' is damaged" in str(e.value)
        assert message in str(e.value)


@pytest.mark.parametrize("signature, message", [
    ({"name": "main", "inputs": {"tuple": [{"leaf": None}]}, "input_avals": [],
      "outputs": {"leaf": None}, "output_avals": [{"shape": [], "dtype": "float32"}]},
     "'input_avals' has one entry per leaf"),
    ({"name": "main", "inputs": {"tuple": []}, "input_avals": [],
      "outputs": {"leaf": None}, "output_avals": [{"shape": [-1], "dtype": "float32"}]},
     "dimensions that are ints >= 0"),
    ({"name": "main", "inputs": {"tuple": []}, "input_avals": [],
      "outputs": {"set": []}, "output_avals": []}, "a node kind among"),
    ({"name": "main", "inputs": {"tuple": [{"leaf": None}]}, "input_avals": [
        {"shape": [], "dtype": "float 32"}], "outputs": {"none": None}, "output_avals": []},
     "with a dtype name"),
    ({"name": "main", "inputs": {"tuple": []}, "input_avals": [], "outputs": {"none": None},
      "output_avals": [], "arg_names": ["../x"]}, "one identifier per argument"),
])
def test_signature_validation(signature, message):
    with pytest.raises(ValueError, match="malformed signature") as e:
        validate(signature)
    assert message in str(e.value)


def test_byte_flip_fuzz_of_sealed_modules(sealed):
    """Single bits and bursts anywhere (fixed seed): each is refused by the seal, before
    IREE reads a byte, so this runs in-process."""
    rng = random.Random(13)
    for _ in range(300):
        start = rng.randrange(len(sealed) * 8)
        end = min(start + rng.randrange(2, 64), len(sealed) * 8)
        bits = [start] if rng.random() < 0.7 else range(start, end)
        with pytest.raises(LoadError):
            load(flip(sealed, *bits))


def test_byte_flip_fuzz_of_unsealed_modules_never_crashes(sealed, tmp_path):
    """The same on a module from plain iree-compile, in a subprocess (damage the CRCs
    miss could reach IREE). Each damaged module is refused, or -- where the bit lies in
    ZIP header bytes neither the CRCs nor IREE read -- runs with the exact results."""
    path = tmp_path / "plain.vmfb"
    path.write_bytes(unseal(sealed))
    script = textwrap.dedent(f"""
        import random
        import numpy as np
        from whilst.runtime import LoadError, load
        data = open({str(path)!r}, "rb").read()
        x = np.ones(3, np.float32)
        want = x
        for _ in range(3):
            want = want * 2.0 + 1.0
        rng = random.Random(14)
        refused = harmless = 0
        for _ in range(300):
            d = bytearray(data)
            d[rng.randrange(len(d))] ^= 1 << rng.randrange(8)
            try:
                n, y = load(bytes(d)).main(3, x)
            except LoadError:
                refused += 1
                continue
            assert int(n) == 3 and np.array_equal(y, want), (n, y)
            harmless += 1
        print("refused", refused, "harmless", harmless)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    refused, harmless = map(int, run.stdout.split()[1::2])
    assert refused >= 295 and refused + harmless == 300, run.stdout
