"""What the command-line tests share: the one line argparse prints for a refused value (the ``no_driver``
fixture is in conftest.py)."""

from __future__ import annotations

import pytest

from mircuda.cli import main


def refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line argparse prints for ``argv`` (exit status 2)."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err
