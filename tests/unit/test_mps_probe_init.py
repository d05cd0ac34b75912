"""`hase gpu probe` when NVML does not start: the message says why, and "no NVIDIA driver found"
only when there is none. The real pynvml module is used; only its nvmlInit is made to fail with
the error NVML gives in each case (this machine has no driver to produce them)."""

from __future__ import annotations

import pytest

from slurm_hase.cli.main import main
from slurm_hase.mps import probe as probe_mod

pynvml = pytest.importorskip("pynvml")


def _probe_error(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                 code_name: str) -> str:
    """stderr of `hase gpu probe` (exit 1) when nvmlInit fails with NVML's code_name."""
    def failing_init() -> None:
        raise pynvml.NVMLError(getattr(pynvml, code_name))

    monkeypatch.setattr(pynvml, "nvmlInit", failing_init)
    monkeypatch.setattr(probe_mod, "load_nvml", lambda: pynvml)
    with pytest.raises(SystemExit) as exc:
        main(["gpu", "probe"])
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err.strip()


@pytest.mark.parametrize("code_name", ["NVML_ERROR_LIBRARY_NOT_FOUND",
                                       "NVML_ERROR_DRIVER_NOT_LOADED"])
def test_no_driver(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                   code_name: str) -> None:
    err = _probe_error(monkeypatch, capsys, code_name)
    assert err.startswith("hase: error: no NVIDIA driver found (NVML: ")


def test_driver_library_mismatch_is_not_a_missing_driver(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """After a driver upgrade without a reboot the driver is there, in another version."""
    err = _probe_error(monkeypatch, capsys, "NVML_ERROR_LIB_RM_VERSION_MISMATCH")
    assert "no NVIDIA driver found" not in err
    assert err.startswith("hase: error: the NVIDIA kernel driver and the NVML library of this "
                          "node differ in version (NVML: RM has detected an NVML/RM version "
                          "mismatch.)")
    assert "reboot" in err


def test_no_permission_is_not_a_missing_driver(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    err = _probe_error(monkeypatch, capsys, "NVML_ERROR_NO_PERMISSION")
    assert "no NVIDIA driver found" not in err
    assert err.startswith("hase: error: the NVIDIA driver refuses this user (NVML: Insufficient "
                          "Permissions)")


def test_other_failures_name_nvml(monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    err = _probe_error(monkeypatch, capsys, "NVML_ERROR_UNKNOWN")
    assert err == "hase: error: NVML could not start (NVML: Unknown Error)"
