"""Every shell command in README.md and docs/*.md runs as written (issue 37).

Commands are read from the fenced `bash` / `sh` / `shell` / `console` blocks and from inline spans
`` `covey ...` `` that carry arguments. Each runs in a scratch folder that holds small stand-ins for what the
docs assume exists (a finished tiny run where a command names runs/<run>, sample and result files, a model
folder where one is named), in its block's order (a block's later commands read what its earlier ones
wrote), at tiny settings:

  covey train CONFIG ...     `covey config show CONFIG ...` (every check train makes before a model loads);
                             `--resume RUN` resumes a finished tiny run
  covey eval / sft           run for real on tiny-llama (another model name is swapped for it, except for the
                             causal task's long prompts), 1 problem, 2 new tokens, 2 SFT steps
  config show, plan, list,   run as written
  algos, tasks, export, plot,
  compare (not --agent / STUDY.yaml)
  compare --agent, matrix    their arguments are parsed (they train seeds: minutes)
  STUDY.yaml, bench, models
  make, pytest, python       the target, test path or script exists
  pip, ray, venvs            not run (environment set-up), listed in `NOT_RUN`

A command that needs CUDA or the hub is parsed only. A template (`covey train CONFIG seed=S`, `covey eval
... --shard`) is not a command and is skipped by the rule in `_is_template`.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = ("bash", "sh", "shell", "console")
pytestmark = pytest.mark.integration  # one tiny training step and ~20 tiny evals: ~26 s of CPU, out of `make test-fast`
NOT_RUN = ("pip", "python3 -m venv", "ray start", "ray status", ".venv-vllm/bin/pip")
TINY = "tiny-llama"


# ------------------------------------------------------------------ reading the docs
def _blocks(text: str):
    """(first line number, [lines]) of each fenced shell block."""
    for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        if m.group(1) in SHELL:
            yield text[: m.start()].count("\n") + 2, m.group(2).split("\n")


def _commands(lines: list[str], first: int):
    """(line number, command) pairs: continuations joined, comments and `for ... do` / `done` shells
    dropped (the loop body runs once, with its variable at its first value), VAR="..." assignments
    substituted into later lines."""
    out, buf, start, env = [], "", None, {}
    loop: dict[str, str] = {}
    for i, raw in enumerate(lines):
        line = raw.rstrip()
        if not line.strip() and not buf:
            continue
        start = first + i if start is None else start
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        cmd, buf, at, start = (buf + line).strip(), "", start, None
        cmd = re.sub(r"\s+#\s.*$", "", cmd) if not cmd.startswith("#") else ""
        if not cmd:
            continue
        m = re.match(r"for (\w+) in (\S+)", cmd)
        if m:
            loop[m.group(1)] = m.group(2)
            continue
        if cmd in ("done",) or cmd.startswith("done"):
            loop.clear()
            continue
        m = re.match(r"^(\w+)=\"(.*)\"$", cmd)
        if m:
            env[m.group(1)] = m.group(2)
            continue
        for k, v in {**env, **loop}.items():
            cmd = cmd.replace(f"${k}", v)
        out.append((at, cmd))
    return out


def _inline(text: str):
    """Inline `covey ...` spans that are whole commands: a subcommand with arguments, no placeholder, and
    arguments the CLI parses (`covey eval --n 256 --k pow2 --samples-out` names options, it is no command)."""
    for m in re.finditer(r"`(covey [^`]+)`", text):
        cmd = " ".join(m.group(1).split())
        words = cmd.split()[1:]
        while words and words[0] in ("config", "compare", "bench", "models"):
            words = words[1:]
        if len(words) < 2 or _is_template(cmd):
            continue
        try:
            _parse_only(shlex.split(cmd)[1:])
        except Exception:  # noqa: BLE001 - click's usage errors: a reference to options, not a command
            continue
        yield text[: m.start()].count("\n") + 1, cmd


def _is_template(cmd: str) -> bool:
    """A command shape, not a command: placeholders (a word in capitals, <...>), ellipses, alternatives."""
    words = cmd.split()[2:]
    return "..." in cmd or " | " in cmd or "<" in cmd or any(re.fullmatch(r"([\w.-]+=)?[A-Z][A-Z_]*(=\S*)?", w) for w in words)


def collect() -> list[tuple[str, int, str, int]]:
    """(doc, line, command, block id) for every command of the docs, in order."""
    out = []
    for doc in DOCS:
        text = doc.read_text()
        name = str(doc.relative_to(ROOT))
        for b, (first, lines) in enumerate(_blocks(text)):
            out += [(name, line, cmd, b) for line, cmd in _commands(lines, first)]
        out += [(name, line, cmd, -1) for line, cmd in _inline(text)]
    return out



# ------------------------------------------------------------------ the scratch folder
@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A folder with stand-ins for what the docs assume: a finished tiny run, a tiny model folder, sample
    files, eval result files, run folders of two methods."""
    from covey.models import load
    from covey.train.config import load_config
    from covey.train.run import train

    root = tmp_path_factory.mktemp("docs")
    model, tok = load(TINY)
    model.save_pretrained(root / "_model")
    tok.save_pretrained(root / "_model")
    cfg = load_config(None, [f"model.name={TINY}", "rollout.prompts_per_step=2", "rollout.group_size=2",
                             "sampling.max_new_tokens=2", "reward_workers=0", "log.report_to=[jsonl]", "log.progress=false",
                             "steps=1", "threads=1"])  # fmt: skip
    train(cfg, root / "_run")  # the quickstart's task (arithmetic, default parameters) on tiny-llama, one step
    return root


_WORKDIRS: dict = {}


def _workdir(root: Path, key) -> Path:
    """The folder a block's commands run in (one per block, one per inline command): the repository's
    examples/, scripts/ and benchmarks/ are linked in, as the docs run from the repository's root."""
    if key not in _WORKDIRS:
        work = root / f"w{len(_WORKDIRS)}"
        work.mkdir()
        for name in ("examples", "scripts", "benchmarks", "_run", "_model"):
            (work / name).symlink_to(ROOT / name if not name.startswith("_") else root / name)
        _WORKDIRS[key] = work
    return _WORKDIRS[key]


_OUTPUTS = ("--out", "--run-dir", "--runs-dir", "--samples-out")
_STATELESS = ("config", "list", "algos", "tasks", "plan", "sft")  # what they print does not depend on the block's files
_PASSED: dict = {}  # (mode, args) -> stdout of a command that ran


def _stand_ins(root: Path, args: list[str]) -> None:
    """Create the inputs a command names but the docs assume exist: a run (copied from the tiny run) or a
    model folder under runs/, and for `covey compare` sample files (`covey eval --samples-out`), eval
    results (`covey eval` stdout) and adastop's scores CSV."""
    for i, a in enumerate(args):
        value = a.split("=", 1)[1] if a.startswith("model.name=") else a
        if (i > 0 and args[i - 1] in _OUTPUTS) or "*" in value or (root / value).exists():
            continue
        if value.startswith("runs/") and not value.endswith((".json", ".jsonl")):
            model = a.startswith("model.name=") or (i > 0 and args[i - 1] in ("--model", "--logprob-under")) or "sft" in value
            shutil.copytree(root / ("_model" if model else "_run"), root / value)
        elif args[:2] in (["compare", "passk"], ["compare", "coverage"]) and value.endswith(".jsonl"):
            other = next((root / f for f in args[2:4] if f != a and (root / f).is_file()), None)  # its partner's problems
            lines = other.read_text().splitlines() if other else []
            meta = json.loads(lines[0]) if lines else {"meta": {"task": "arithmetic", "params": {}, "split": "test", "limit": 2}}
            ids = sorted({json.loads(x)["problem_id"] for x in lines[1:]}) or [0, 1]
            recs = [{"problem_id": p, "sample": k, "correct": (p + k) % 2 == 0} for p in ids for k in range(4)]
            (root / value).parent.mkdir(parents=True, exist_ok=True)
            (root / value).write_text("".join(json.dumps(r) + "\n" for r in [meta, *recs]))
        elif args[:2] == ["compare", "adastop"] and i > 0 and args[i - 1] == "--scores":  # adastop's CSV: index, agents
            n = int(args[args.index("--n") + 1]) * int(args[args.index("--K") + 1]) if "--n" in args and "--K" in args else 5
            (root / value).write_text("seed,a,b\n" + "".join(f"{k},{0.1 * k},{0.1 * k + 0.01}\n" for k in range(n)))
        elif args[:2] == ["compare", "matrix"] and value.endswith(".json") or "=" in value and args[:2] == ["compare", "matrix"]:
            base = args[args.index("--base") + 1].split(",") if "--base" in args else []
            for j, f in enumerate(value.split("=", 1)[-1].split(",")):  # --base a.json,b.json / --row NAME=a.json,b.json
                if f.endswith(".json") and not (root / f).exists():  # column j: the base's eval domain j
                    like = root / base[j] if j < len(base) and (root / base[j]).is_file() else None
                    (root / f).write_text(like.read_text() if like else json.dumps({"task": "arithmetic", "accuracy": 0.5}) + "\n")


def _run_stand_in(root: Path, run_dir: str, shown: str) -> None:
    """After `covey train CONFIG --run-dir X` is checked (not trained), X becomes a finished tiny run with
    that config's task and rewards, for the commands after it (`covey eval --run X`, ...)."""
    dst = root / run_dir
    if dst.exists():
        return
    shutil.copytree(root / "_run", dst)
    cfg, theirs = yaml.safe_load((dst / "config.yaml").read_text()), yaml.safe_load(shown)
    for key in ("task", "rewards", "algo", "seed"):  # what it would have trained; the tiny model and its weights stay
        cfg[key] = theirs.get(key, cfg.get(key))
    (dst / "config.yaml").write_text(yaml.safe_dump(cfg))


# ------------------------------------------------------------------ running one command
def _words(cmd: str) -> list[str]:
    """The command's words without what only sets up its process: VAR=value, env, nice -n N,
    timeout [-s SIG] DURATION, `ray job submit ... --` (the command it submits)."""
    if " -- " in cmd and cmd.startswith("ray job submit"):
        cmd = cmd.split(" -- ", 1)[1]
    words = shlex.split(cmd.replace("<run>", "_docrun"))
    while words:
        if re.fullmatch(r"\w+=\S*", words[0]) or words[0] == "env":
            words = words[1:]
        elif words[0] == "nice":
            words = words[3:] if words[1:2] == ["-n"] else words[1:]
        elif words[0] == "timeout":
            words = words[3:] if words[1:2] in (["-s"], ["-k"]) else words[1:]
            words = words[1:]
        else:
            return words
    return words


def _covey_args(cmd: str) -> tuple[list[str], str | None] | None:
    """The covey argument list of a shell command (process set-up and a venv's bin/ dropped) and a stdout
    redirect target; None when it is not a covey command."""
    cmd = cmd.rstrip("&").strip()
    redirect = None
    m = re.search(r"\s>\s*(\S+)$", cmd)
    if m:
        cmd, redirect = cmd[: m.start()], m.group(1)
    words = _words(cmd)
    if not words or not words[0].endswith("covey"):
        return None
    return words[1:], redirect


def _tiny(args: list[str]) -> list[str]:
    """covey eval / sft at tiny settings (the doc's options kept, sizes shrunk, models swapped for tiny-llama)."""
    out, skip = [], False
    drop = {"--limit", "--max-new-tokens", "--batch-prompts", "--steps", "--batch-size"}
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a in drop:
            skip = True
            continue
        if i > 0 and args[i - 1] in ("--model", "--logprob-under") and not a.startswith("runs/") and "causal" not in args:
            a = TINY  # causal's prompts need a real context (1,329 tokens): it keeps its model
        out.append(a)
    if args[0] == "eval":
        out += ["--limit", "1", "--max-new-tokens", "2"]
    if args[0] == "sft":
        out += ["--steps", "2", "--batch-size", "2"]
    return out


def _parse_only(args: list[str]) -> None:
    """Parse the arguments with the CLI's own click command (options, types, required ones), run nothing."""
    import typer

    from covey.cli import app

    group = typer.main.get_command(app)  # typer vendors its own click: groups are told by resolve_command
    ctx = group.make_context("covey", list(args), resilient_parsing=False)
    cmd, sub = group, list(args)
    while hasattr(cmd, "resolve_command"):
        name, cmd, sub = cmd.resolve_command(ctx, sub)
        ctx = cmd.make_context(name, sub, parent=ctx)


def _glob(root: Path, arg: str) -> list[str]:
    """A shell glob expanded in the scratch folder; runs/* keeps run folders only (the stand-in model
    folders there are not what a user's runs/ holds)."""
    if "*" not in arg:
        return [arg]
    m = re.fullmatch(r"runs/([\w.]+)-\*", arg)
    if m and not list(root.glob(arg)):  # runs/grpo-*: two finished seeds of that method
        for seed in range(2):
            run = root / "runs" / f"{m.group(1)}-{seed}"
            shutil.copytree(root / "_run", run)
            cfg = yaml.safe_load((run / "config.yaml").read_text())
            cfg["algo"]["preset"], cfg["seed"] = m.group(1), seed
            (run / "config.yaml").write_text(yaml.safe_dump(cfg))
            (run / "metrics.jsonl").write_text("".join(json.dumps({"step": k, "reward/mean": 0.1 * k + seed}) + "\n"
                                                       for k in (1, 2)))  # fmt: skip
    found = sorted(str(p.relative_to(root)) for p in root.glob(arg) if (p / "metrics.jsonl").is_file())
    return found or [arg]


def _mode(args: list[str], cmd: str) -> str:
    if any(x in cmd for x in ("device=cuda", "--device cuda", "path=hub", ".venv-vllm/")):
        return "parse"  # needs CUDA / the hub / the vllm venv
    sub = args[0] if args else ""
    if sub in ("bench", "models") or (sub == "compare" and ("--agent" in args or any(a.endswith(".yaml") for a in args))):
        return "parse"
    if sub == "train":
        return "resume" if "--resume" in args else "show"
    return "run"


def run_command(root: Path, cmd: str, monkeypatch) -> str:
    """Run one documented command in `root`; returns what ran ("run", "show", ...) or raises with the output."""
    from typer.testing import CliRunner

    from covey.cli import app

    monkeypatch.chdir(root)
    parsed = _covey_args(cmd)
    if parsed is None:
        return _other(root, cmd)
    args, redirect = parsed
    args = [x for a in args for x in _glob(root, a)]
    _stand_ins(root, args)
    mode = _mode(args, cmd)
    _parse_only(args)
    if mode == "parse":
        return mode
    key = (mode, tuple(args))
    if key in _PASSED and redirect is None and (mode == "show" or args[0] in _STATELESS):
        if mode == "show" and "--run-dir" in args:
            _run_stand_in(root, args[args.index("--run-dir") + 1], _PASSED[key])
        return mode  # the same command already ran (in another doc or block): once is enough
    if mode == "show":
        keep, skip = [], False
        for a in args[1:]:
            if skip:
                skip = False
            elif a == "--run-dir":
                skip = True
            else:
                keep.append(a)
        args = ["config", "show", *keep]
    elif mode == "resume":
        args = [*args, "log.progress=false"]
    elif args[0] in ("eval", "sft"):
        args = _tiny(args)
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, f"`{cmd}` -> covey {' '.join(args)} exited {res.exit_code}:\n{res.output[-3000:]}"
    _PASSED[key] = res.stdout
    if mode == "show" and "--run-dir" in parsed[0]:
        _run_stand_in(root, parsed[0][parsed[0].index("--run-dir") + 1], res.stdout)
    if redirect:
        (root / redirect).write_text(res.stdout)
    return mode


def _other(root: Path, cmd: str) -> str:
    """A shell command that is not covey: what it names must exist; environment set-up is not run."""
    if cmd.startswith(NOT_RUN):
        return "not run"
    words = _words(cmd.rstrip("&").strip())
    if words[0] == "make":
        targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
        assert set(words[1:]) <= targets, f"`{cmd}`: no make target {sorted(set(words[1:]) - targets)}"
    elif words[0] in ("pytest",) or words[1:2] == ["-m"] and words[2:3] == ["pytest"]:
        paths = [w for w in words if w.startswith("tests")]
        assert all((ROOT / p).exists() for p in paths), f"`{cmd}`: missing {paths}"
    elif words[0] in ("python", "python3") or words[0].endswith(".sh"):
        script = next((w for w in words if w.endswith((".py", ".sh"))), None)
        assert script and (ROOT / script).is_file(), f"`{cmd}`: no script {script}"
    elif words[0] in ("head", "cat"):
        assert (ROOT / words[-1]).is_file(), f"`{cmd}`: no file {words[-1]}"
    else:
        raise AssertionError(f"`{cmd}`: a shell command this test does not know how to check; teach it or reword the doc")
    return "checked"


COMMANDS = collect()  # after every helper it uses is defined


def _units() -> list[list[tuple[str, int, str, int]]]:
    """One test per fenced block (its commands in order: later ones read what earlier ones wrote, so a
    block is never split between test workers) and per inline command."""
    units: dict = {}
    for doc, line, cmd, block in COMMANDS:
        units.setdefault((doc, block) if block >= 0 else (doc, line, cmd), []).append((doc, line, cmd, block))
    return list(units.values())


UNITS = _units()


@pytest.mark.parametrize("unit", UNITS, ids=[f"{u[0][0]}:{u[0][1]}" for u in UNITS])
def test_documented_commands_run(scratch, monkeypatch, unit):
    for doc, line, cmd, block in unit:
        work = _workdir(scratch, (doc, block) if block >= 0 else (doc, line, cmd))
        ran = run_command(work, cmd, monkeypatch)
        assert ran in ("run", "show", "resume", "parse", "checked", "not run"), f"{doc}:{line}: {cmd}"


def test_the_docs_have_commands_and_the_known_bad_one_is_fixed():
    cmds = [c for _, _, c, _ in COMMANDS]
    assert len(cmds) > 80
    mixture = [c for c in cmds if "--task mixture" in c]
    assert mixture and all("--model" in c or "--run" in c for c in mixture)  # docs/tasks.md lacked --model
