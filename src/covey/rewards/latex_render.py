r"""Render a model-written LaTeX table to a grayscale page image, contained.

Model-written LaTeX is untrusted input: ``\input{/etc/passwd}``, ``\openout`` and ``\write18`` read,
write and run things. Each render is one `covey.rewards.sandbox.binary.run_script` call (bubblewrap: no
network, no home, read-only TeX tree, a private tmpfs working directory, rlimits, a fresh uid) running

    pdflatex -no-shell-escape -interaction=nonstopmode main.tex     with openin_any=p openout_any=p
    pdftoppm -r <dpi> -f 1 -l 1 -singlefile -gray main.pdf page     (page 1, 8-bit gray PGM)

and the PGM comes back through a pipe and is parsed here (no image decoder on the host side). Fonts
missing from the TeX tree's caches are generated inside the sandbox (TEXMFVAR in its tmpfs).

The document is Table2LaTeX-RL's render template (newLLing/Table2LaTeX-RL cff3258f,
examples/train/grpo/plugin/plugin.py::safe_render_tex): article with its package list, the table body
inside ``\begin{table}\centering\resizebox{0.5\columnwidth}{!}{...}\end{table}``, page 1 at 300 dpi;
covey adds ``\pagestyle{empty}`` (no page number: `table_render` crops the page to its ink).
Toolchain (Debian): texlive-latex-base, texlive-latex-recommended (booktabs, xcolor), texlive-latex-extra
(multirow), poppler-utils (pdftoppm), bubblewrap.
"""

from __future__ import annotations

import functools
import re
import shutil

import numpy as np

from covey.rewards.sandbox.binary import run_script
from covey.rewards.sandbox.limits import SandboxLimits

__all__ = ["PREAMBLE", "TEX_PACKAGES", "render_table", "tex_status"]

TEX_PACKAGES = ("inputenc", "fontenc", "amsmath", "amsthm", "amssymb", "graphicx", "geometry", "array", "xcolor",
                "booktabs", "multirow", "natbib", "tabularx", "multicol", "bm")  # fmt: skip
PREAMBLE = (
    r"\documentclass[standalone]{article}"
    r"\usepackage[utf8]{inputenc}"
    r"\usepackage[T1]{fontenc}"
    r"\usepackage{amsmath, amsthm, amssymb, graphicx, geometry, array,xcolor}"
    r"\usepackage{booktabs, multirow, natbib, tabularx, multicol, bm}"
    r"\pagestyle{empty}"
    r"\begin{document}\begin{table}\centering\resizebox{0.5\columnwidth}{!}{"
)
ENDING = r"}\end{table}\end{document}"
TEX_BINDS = ("/etc/texmf", "/var/lib/texmf")  # texmf.cnf, ls-R databases, formats, font maps (the tree is in /usr)
TEX_ENV = {"openin_any": "p", "openout_any": "p", "shell_escape": "f", "TEXMFVAR": "/tmp/texmf-var",
           "TEXMFOUTPUT": "/tmp"}  # fmt: skip
_SCRIPT = (
    'pdflatex -no-shell-escape -interaction=nonstopmode main.tex </dev/null >/dev/null 2>&1\n'
    '[ -s main.pdf ] || { tail -c 1500 main.log >&2; exit 3; }\n'
    'pdftoppm -r {dpi} -f 1 -l 1 -singlefile -gray main.pdf page >/dev/null 2>&1 || exit 4\n'
    'cat page.pgm >&"$1"\n'
)


@functools.lru_cache(maxsize=1)
def tex_status() -> tuple[bool, str]:
    """(usable, reason): pdflatex, pdftoppm, the preamble's packages and the sandbox are all there."""
    from covey.rewards.sandbox import sandbox_status

    missing = [b for b in ("pdflatex", "pdftoppm", "kpsewhich") if shutil.which(b) is None]
    if missing:
        return False, (f"{', '.join(missing)} not found (apt-get install texlive-latex-base texlive-latex-recommended "
                       "texlive-latex-extra poppler-utils)")  # fmt: skip
    import subprocess

    found = subprocess.run(["kpsewhich", *[p + ".sty" for p in TEX_PACKAGES]], capture_output=True, text=True).stdout
    absent = [p for p in TEX_PACKAGES if f"/{p}.sty" not in found]
    if absent:
        return False, f"LaTeX packages not found: {', '.join(absent)} (multirow: texlive-latex-extra)"
    ok, why = sandbox_status()
    return (True, "pdflatex in bubblewrap") if ok else (False, f"no sandbox for pdflatex: {why}")


def parse_pgm(data: bytes, max_pixels: int = 40_000_000) -> np.ndarray:
    """An 8-bit binary PGM (P5) as a uint8 [H, W] array; ValueError for anything else.

    >>> parse_pgm(b"P5\\n3 1\\n255\\n" + bytes([32, 10, 255])).tolist()  # pixel bytes may look like whitespace
    [[32, 10, 255]]
    """
    m = re.match(rb"P5\s+(\d+)\s+(\d+)\s+(\d+)\s", data)  # no comments: pdftoppm writes none
    if m is None:
        raise ValueError("not a binary PGM")
    w, h, maxval = (int(g) for g in m.groups())
    if maxval != 255 or not 0 < w * h <= max_pixels:
        raise ValueError(f"unexpected PGM: {w}x{h}, maxval {maxval}")
    pixels = data[m.end() : m.end() + w * h]  # exactly one whitespace byte ends the header
    if len(pixels) != w * h:
        raise ValueError("truncated PGM")
    return np.frombuffer(pixels, dtype=np.uint8).reshape(h, w)


def render_table(latex: str, dpi: int = 300, timeout_s: float = 30.0, memory_mb: int = 1024) -> tuple[np.ndarray | None, str]:
    """(page image or None, why): the table body rendered in Table2LaTeX-RL's template, page 1, gray."""
    tex = (PREAMBLE + latex + ENDING).encode("utf-8")
    limits = SandboxLimits(timeout_s=timeout_s, memory_mb=memory_mb, file_mb=64, tmpfs_mb=256, nproc=64, nofile=256,
                           max_drain_bytes=64 * 1024 * 1024)  # fmt: skip
    res = run_script(_SCRIPT.replace("{dpi}", str(int(dpi))), {"main.tex": tex}, limits, binds=TEX_BINDS, env=TEX_ENV)
    if res.timed_out:
        return None, "timeout"
    if res.exit_code == 3:
        return None, "no_pdf"
    if res.exit_code != 0:
        return None, f"render_error({res.exit_code})"
    try:
        return parse_pgm(res.channel), ""
    except ValueError as e:
        return None, f"bad_image: {e}"
