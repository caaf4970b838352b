"""tools/mpvm.py's own contract: an exception inside the VM reaches the test with its real traceback, also where
sys.print_exception is missing (CircuitPython has only traceback.print_exception, as CPython does)."""

import contextlib
import io

import pytest

from tools import mpvm
from tools.mpvm import MicroVM, VMError


def test_a_vm_exception_carries_its_traceback():
    with MicroVM() as vm, pytest.raises(VMError) as err:
        vm.run("def f():\n    raise ValueError('boom')\nf()\n")
    assert "ValueError: boom" in str(err.value) and "in f" in str(err.value)


def test_the_error_handler_runs_without_sys_print_exception():
    # CPython, like CircuitPython, has no sys.print_exception: the handler must still print the traceback.
    program = mpvm._PRELUDE + "    raise KeyError('no such key')\n" + mpvm._EPILOGUE
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(program, "<vm>", "exec"), {})
    text = out.getvalue()
    assert "@@VM-EXCEPTION@@" in text and "KeyError: 'no such key'" in text
