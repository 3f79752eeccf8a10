"""`main` called again in the same process (the tests, a script) builds the same CLI, not a larger one."""

from __future__ import annotations

from ragcost.cli import main as cli


def test_calling_main_again_registers_no_second_copy_of_any_command(capsys):
    cli.main(["--help"])
    commands, groups = len(cli.app.registered_commands), len(cli.app.registered_groups)
    for _ in range(3):
        cli.main(["--help"])
    capsys.readouterr()
    assert (len(cli.app.registered_commands), len(cli.app.registered_groups)) == (commands, groups)
    names = [c.name for c in cli.app.registered_commands]
    assert len(names) == len(set(names)), names
