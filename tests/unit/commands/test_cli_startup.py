"""The command line imports only the module of the sub-command it runs (`policyd --help` none)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from policyd.cli import COMMANDS, build_parser, command_of, main


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["lint", "policies/"], "lint"),
        (["-v", "-v", "run", "--kubeconfig", "k"], "run"),
        (["--verbose", "simulate"], "simulate"),
        (["--version"], ""),
        (["-h"], ""),
        ([], ""),
        (["--", "lint"], ""),
    ],
)
def test_the_command_is_the_first_word_not_an_option(argv: list[str], command: str) -> None:
    assert command_of(argv) == command


def _modules_loaded_by(argv: list[str]) -> set[str]:
    """The policyd.commands modules a fresh interpreter holds after `policyd ARGV`."""
    code = (
        "import sys\n"
        "from policyd.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(m for m in sys.modules if m.startswith('policyd.commands.')), file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stderr.split())


def test_help_imports_no_command_module_and_lists_every_command() -> None:
    assert _modules_loaded_by(["--help"]) == set()
    listed = build_parser("").format_help()
    assert all(name in listed for name in COMMANDS)


def test_a_command_imports_its_own_module_not_the_others() -> None:
    loaded = _modules_loaded_by(["eval", "1 + 2"])
    assert "policyd.commands.eval" in loaded
    assert not loaded & {"policyd.commands.run", "policyd.commands.bench", "policyd.commands.playground"}


def test_linting_a_policy_imports_neither_the_suite_runner_nor_the_simulator() -> None:
    """`policyd lint FILE` (an editor's check on save) brings in the simulator only for a test suite."""
    from policyd import shipped

    example = str(shipped.policies_dir() / "examples" / "binpack.policy")
    loaded = _modules_loaded_by(["lint", example])
    assert "policyd.commands.lint" in loaded and "policyd.commands.suite" not in loaded
    assert "policyd.commands.simulate" not in loaded
    suites = _modules_loaded_by(["lint", str(shipped.policies_dir() / "tests")])
    assert "policyd.commands.suite" in suites


def test_a_command_still_parses_and_runs_its_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "1 + 2"]) == 0
    assert capsys.readouterr().out.strip() == "3"
    with pytest.raises(SystemExit) as raised:
        main(["no-such-command"])
    assert raised.value.code == 2
    assert "invalid choice: 'no-such-command'" in capsys.readouterr().err


MINIMAL_ARGS = {
    "test": ["suite.yaml"],
    "explain": ["--pod", "ns/p"],
    "diff": ["--policies", "a", "--against", "b"],
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_parses_with_its_module_alone_or_with_all(name: str) -> None:
    argv = [name, *MINIMAL_ARGS.get(name, [])]
    for parser in (build_parser(name), build_parser()):
        assert parser.parse_args(argv)._module.__name__ == f"policyd.commands.{name}"
