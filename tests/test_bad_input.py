"""Bad input on the command lines, by class: every option of every command (walked from the
click tree, so a new command or option is covered without a new test), --experiment, --home
and --md5 checked before any work, and the TUI opening specs of the wrong shape with the
command line's own errors. Spec and profile fields: test_bad_fields.py.

Each case ends the same way: exit 2, one line naming the option or the file, line and field
and what is allowed, no traceback, nothing done."""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

import click
import pytest
from test_bad_fields import BASE, HUGE, HUGE_NEGATIVE, problems_of, render

from conftest import BIN, HANG_S, dlscale
from dlscale.engine.cli import cli, main
from dlscale.engine.tracking.store import Store

pytestmark = pytest.mark.timeout(600)


def invoke(capsys, *args: str) -> tuple[int, str, str]:
    """`dlscale ARGS` in this process (the bulk of the cases; the real binary for a few)."""
    code = 0
    try:
        main(list(args))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out, err = capsys.readouterr()
    return code, out, err


def refused(code: int, err: str, *fragments: str) -> None:
    assert code == 2, (code, err)
    assert "Traceback" not in err and "internal error" not in err, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


# --- the command line: every command, every option -----------------------------------------


def commands(group: click.Group, path: tuple[str, ...] = ()):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # the lazy group imports each command here
        cmd = group.get_command(ctx, name)
        if isinstance(cmd, click.Group):
            yield from commands(cmd, (*path, name))
        else:
            yield (*path, name), cmd


COMMANDS = list(commands(cli))


@pytest.fixture
def stocked(home, tmp_path):
    """A store holding one experiment, and a valid spec for commands that take one."""
    from conftest import write_spec

    spec = write_spec(tmp_path / "ok.toml", name="alpha")
    Store(home).save_experiment("alpha", str(spec), spec.read_text(), "0" * 12)
    return spec


def arguments_for(cmd: click.Command, spec: Path) -> list[str]:
    """Valid-looking values for a command's arguments, so the option is what is wrong."""
    args = []
    for p in cmd.params:
        if isinstance(p, click.Argument):
            if isinstance(p.type, click.Choice):
                args.append(str(p.type.choices[0]))
            elif isinstance(p.type, click.Path):
                args.append(str(spec) if p.type.dir_okay is False else str(spec.parent / "d"))
            else:
                args.append("0123456789ab")
    return args


def test_the_walk_finds_every_command():
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {
        "plan",
        "run",
        "status",
        "results",
        "chart",
        "logs",
        "cancel",
        "report",
        "data fetch",
        "env create",
        "export mllog",
        "doctor",
    } <= names


@pytest.mark.parametrize("path,cmd", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_command_refuses_unknown_and_wrong_typed_options(capsys, stocked, path, cmd):
    code, _, err = invoke(capsys, *path, *arguments_for(cmd, stocked), "--no-such-option")
    refused(code, err, "No such option '--no-such-option'")
    for opt in (p for p in cmd.params if isinstance(p, click.Option) and not p.is_flag):
        name = max(opt.opts, key=len)
        bad: list[str] = []
        if isinstance(opt.type, (click.Choice,)):
            bad = ["no-such-choice"]
        elif isinstance(opt.type, (click.types.IntParamType, click.IntRange)):
            bad = ["abc", "1.5", HUGE, HUGE_NEGATIVE]
        for value in bad:
            code, _, err = invoke(capsys, *path, *arguments_for(cmd, stocked), name, value)
            refused(code, err, name)


def test_dlscale_tui_refuses_unknown_and_wrong_typed_options(capsys):
    """Its command line fails while parsing, before the app starts."""
    from dlscale.tui.app import main as tui_main

    cases = [["--no-such-option"]] + [
        [max(o.opts, key=len), "no-such-choice"]
        for o in tui_main.params
        if isinstance(o, click.Option) and isinstance(o.type, click.Choice)
    ]
    assert len(cases) > 1
    for args in cases:
        with pytest.raises(SystemExit) as info:
            tui_main.main(args, prog_name="dlscale-tui")
        refused(info.value.code, capsys.readouterr().err, args[0])


def test_every_integer_option_says_its_range(capsys, stocked):
    for path, cmd in COMMANDS:
        for opt in cmd.params:
            if isinstance(opt, click.Option) and isinstance(opt.type, click.types.IntParamType):
                assert (
                    isinstance(opt.type, click.IntRange)
                    and opt.type.min is not None
                    and opt.type.max is not None
                ), (path, opt.name)
                code, _, err = invoke(
                    capsys,
                    *path,
                    *arguments_for(cmd, stocked),
                    max(opt.opts, key=len),
                    str(opt.type.max + 1),
                )
                refused(code, err, f"{opt.type.min}<=x<={opt.type.max}")


EXPERIMENT_COMMANDS = [
    (p, c)
    for p, c in COMMANDS
    if any(isinstance(o, click.Option) and o.name == "experiment" for o in c.params)
]


@pytest.mark.parametrize(
    "path,cmd", EXPERIMENT_COMMANDS, ids=[" ".join(p) for p, _ in EXPERIMENT_COMMANDS]
)
def test_an_unknown_experiment_is_refused_naming_the_known_ones(capsys, stocked, path, cmd):
    for flag in ("--experiment", "-e"):
        code, out, err = invoke(capsys, *path, flag, "NOPE")
        refused(code, err, "no experiment 'NOPE'", "alpha")
        assert len(err.strip().splitlines()) == 1, err
        assert not out  # no empty table
    if path[0] in ("status", "results", "chart", "cancel"):  # a known one is taken
        code, out, err = invoke(capsys, *path, "-e", "alpha")
        assert code == 0 and out and "error" not in err, (code, out, err)


def test_the_reported_cases_on_the_real_command_line(tmp_path, stocked, home):
    """Issue 11, item 16, as a user ran them."""
    for args, says in [
        (["status", "-e", "NOPE"], "no experiment 'NOPE'"),
        (["chart", "--width", "-5"], "--width"),
        (["chart", "--height", "0"], "--height"),
        (["logs", "-n", "-5", "0123456789ab"], "-n"),
        (["cancel", "-e", "NOPE"], "no experiment 'NOPE'"),
    ]:
        proc = dlscale(*args)
        refused(proc.returncode, proc.stderr, says)
        assert not proc.stdout


def test_an_option_the_backend_would_ignore_is_refused(capsys, stocked, home):
    """--profile with --backend local, --partition without a profile: once dropped silently
    (a plan for this machine when the user named a cluster)."""
    from conftest import REPO

    profile = str(REPO / "examples" / "clusters" / "test-cluster.toml")
    for command in ("plan", "run"):
        for extra, says in [
            (["--backend", "local", "--profile", profile], "--backend slurm"),
            (["--partition", "debug"], "--profile"),
        ]:
            code, out, err = invoke(capsys, command, str(stocked), *extra)
            refused(code, err, says)
            assert len(err.strip().splitlines()) == 1 and not out, err
    assert Store(home).runs() == []
    import subprocess

    proc = subprocess.run(
        [str(BIN / "dlscale-tui"), "--partition", "debug"],
        text=True,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=HANG_S,
    )
    refused(proc.returncode, proc.stderr, "--profile")


def test_home_that_cannot_be_made_or_written_is_refused(capsys, tmp_path, monkeypatch):
    afile = tmp_path / "a-file"
    afile.write_text("mine\n")
    for bad, why in [
        ("/proc/x", "/proc"),
        (str(afile), "not a folder"),
        (str(afile / "sub"), "not a folder"),
    ]:
        for args in (["--home", bad, "status"], ["--home", bad, "env", "list"]):
            code, _, err = invoke(capsys, *args)
            refused(code, err, bad, why)
            assert len(err.strip().splitlines()) == 1, err
        monkeypatch.setenv("DLSCALE_HOME", bad)
        code, _, err = invoke(capsys, "results")
        refused(code, err, bad, "DLSCALE_HOME")
        monkeypatch.delenv("DLSCALE_HOME")
    assert afile.read_text() == "mine\n"  # untouched
    proc = dlscale("--home", "/proc/x", "status")
    refused(proc.returncode, proc.stderr, "/proc/x")
    import subprocess

    proc = subprocess.run(
        [str(BIN / "dlscale-tui"), "--home", str(afile)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=HANG_S,
    )
    refused(proc.returncode, proc.stderr, str(afile), "not a folder")


@pytest.fixture
def server(tmp_path):
    """A real HTTP server on 127.0.0.1; counts the requests it gets."""
    hits = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            pass

    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "c.tar.gz").write_bytes(b"not an archive")
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(tmp_path / "www"))
    )
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/c.tar.gz", hits
    httpd.shutdown()
    httpd.server_close()


def test_a_malformed_md5_is_refused_before_downloading(capsys, tmp_path, server, monkeypatch):
    url, hits = server
    for md5 in ("xyz", "0" * 31, "g" * 32, "0" * 33, ""):
        code, _, err = invoke(
            capsys,
            "data",
            "fetch",
            "cifar10",
            "--dir",
            str(tmp_path / "data"),
            "--url",
            url,
            "--md5",
            md5,
        )
        refused(code, err, "--md5", "32 hex digits")
    monkeypatch.setenv("DLSCALE_CIFAR10_MD5", "xyz")
    code, _, err = invoke(
        capsys, "data", "fetch", "cifar10", "--dir", str(tmp_path / "data"), "--url", url
    )
    refused(code, err, "DLSCALE_CIFAR10_MD5")
    assert hits == [] and not (tmp_path / "data").exists()


# --- the TUI: a spec of the wrong shape opens with the command line's errors --------------

TUI_CASES = {
    "experiment-string": ('experiment = "x"', {"experiment"}),
    "experiment-number": ("experiment = 5", {"experiment"}),
    "training-string": ('training = "x"', {"training"}),
    "options-number": ("options = 3", set()),
    "name-number": ("", {"name": "5"}),
    "name-list": ("", {"name": '["a", "b"]'}),
    "frameworks-string": ("", {"frameworks": '"pytorch-ddp"'}),
    "scales-number": ("", {"scales": "5"}),
    "scales-table": ("", {"scales": "[{nodes = {a = 1}, ranks_per_node = [1]}]"}),
    "batch-table": ("", {"per_device_batch": "{a = 1}"}),
    "models-numbers": ("", {"models": "[1, 2]"}),
    "repetitions-list": ("", {"repetitions": "[1]"}),
    "huge-batch": ("", {"per_device_batch": f"[{HUGE}]"}),
}


def tui_spec(tmp_path: Path, case: str) -> Path:
    root, change = TUI_CASES[case]
    tables = {t: dict(keys) for t, keys in BASE.items()}
    if isinstance(change, set):
        for t in change:
            tables.pop(t)
    else:
        tables["experiment"].update(change)
    text, _ = render(tables, root)
    path = tmp_path / f"{case}.toml"
    path.write_text(text)
    return path


def _tables_of_arrays(tmp_path: Path) -> list[Path]:
    out = []
    for table in ("experiment", "training"):
        text, _ = render(BASE)
        path = tmp_path / f"array-{table}.toml"
        path.write_text(text.replace(f"[{table}]", f"[[{table}]]"))
        out.append(path)
    path = tmp_path / "steps-string.toml"
    path.write_text(render(BASE)[0].replace("steps = 4", 'steps = "4"'))
    return [*out, path]


async def test_tui_opens_wrong_shaped_specs_with_the_command_lines_errors(home, tmp_path):
    from dlscale.engine.session import Session
    from dlscale.tui.app import DlscaleApp
    from test_tui import field, until

    specs = [tui_spec(tmp_path, case) for case in TUI_CASES] + _tables_of_arrays(tmp_path)
    app = DlscaleApp(Session(home, "local"), str(specs[0]), watch=False)
    async with app.run_test(size=(120, 60)) as pilot:
        for n, spec in enumerate(specs):
            expected = problems_of(spec)
            assert expected, spec
            if n:  # the first came from the command line; the rest through ctrl+o
                await pilot.press("ctrl+o")
                await pilot.pause(0.2)
                app.screen.query_one("#path-input").value = str(spec)
                await pilot.press("enter")
            await until(
                pilot,
                lambda: all(p in str(field(app, "preview").render()) for p in expected),
                what=f"the errors of {spec}",
            )
            assert "does not validate" in str(field(app, "preview").render())
