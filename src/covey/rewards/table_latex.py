r"""Table2LaTeX-RL's two rewards (arXiv 2509.17589, VSGRPO): a table's structure and its rendered look.

Checked against the released training rewards, newLLing/Table2LaTeX-RL cff3258f
(examples/train/grpo/plugin/plugin.py: `Table2Latexform` = `external_table2latex_form`, `Table2LatexAcc`
= `external_table2latex_acc`), reimplemented here:

    grid(latex):  drop % comments and "\\[..]" (with the row break), newlines and tabs; the first
                  \begin{tabular..}..\end{tabular..} (none: no table); drop rules (\hline, \toprule, \cline, ...,
                  \caption, \centering); split rows at "\\" and cells at unescaped "&"; \multirow{n} / \multicolumn{n}
                  set spans; cells are laid on a grid as in the reference (covered slots are span markers, short
                  rows padded with empty cells). The \begin{tabular}{..} text stays in the first cell and the
                  \end{tabular} after a final "\\" becomes a last one-cell row, in both tables, as in the reference.
    TEDS-S:       the grid as a tree table > tr > td(colspan, rowspan); tree edit distance (APTED, unit insert /
                  delete, rename 1 when tag or spans differ, cell text ignored);
                  TEDS-S = 1 - dist / max(#tr + #td of either);  no table in the completion: 0
    table_teds    (the "format" reward):  1.0 if TEDS-S > 0.9 else 0.0          (threshold: null gives TEDS-S)
    table_render  (the "accuracy" reward): 0.0 if TEDS-S < 0.3 (not rendered); 0.0 if fewer than half the cells'
                  texts match (`text_overlap` < text_gate 0.5, not rendered; covey's); else both tables rendered
                  (`covey.rewards.latex_render`: pdflatex in the sandbox, page 1 at 300 dpi, gray, no page number),
                  each page cut to the bounding box of its ink (pixels < 250) and both put at their native scale on one
                  white canvas (covey's: the reference compares whole pages, the completion's resized to the
                  reference's); a page with no ink: 0.0;  1.0 if CW-SSIM > 0.6 else 0.0; no compile: 0.0
    CW-SSIM (the reference's own, not Wang & Simoncelli's steerable-pyramid index): one level of a Haar-like
    transform on 2x2 blocks (a b / c d):  A = (a+b+c+d)/4, H = (a-c)/2, V = (a-b)/2, D = (a-d)/2, computed in
    uint8 arithmetic as the reference does (sums wrap modulo 256; `arithmetic: float` is covey's variant
    without the wrap); on each band one global SSIM, mean / biased variance / unbiased covariance,
    C1 = (0.01*255)^2, C2 = (0.03*255)^2, 1 if both bands are flat (std < 1e-6) and equal, 0 if flat and
    different, else clamped to [0, 1];  CW-SSIM = mean of the four.

How the two combine: the reference registers them as two ms-swift reward functions; ms-swift sums its reward
functions with weight 1 each by default, and the released launch script (run_external_rm.sh) still names the
math rewards, so the weights the paper trained with are UNVERIFIED. In covey: two entries of `rewards:`.
Departures: the reference parses LaTeX -> HTML -> lxml; covey builds the same tree from the grid directly
(an HTML-looking cell text such as "<b>" no longer adds nodes); a grid or span over `max_cells` cells scores 0
and is refused before it is allocated (the reference has no bound: ``\multicolumn{1000000000}`` allocated 8 GB);
a pair whose node counts alone keep TEDS-S below the threshold / gate skips APTED (TEDS-S <= min(n) / max(n));
the reference's GPU path computes SSIM with an unbiased variance, covey always uses the CPU formula; pdftoppm's
gray output replaces PIL's RGB -> L conversion. The render comparison departs on purpose: against the whole page
a blank page scored 0.80 (300 dpi) because the reference's table covers a few percent of it, so \iffalse, a
table moved off the page, white or \phantom text, garbage cell text and a table shrunk to 1 cm all passed; covey
compares the cropped ink at one scale (a blank page is 0.0) and gates on the cell text first. Known ways around
that remain: cells in white text score by how much ink the rest keeps (8 of 15 cells white: CW-SSIM 0.70 > 0.6),
which cannot carry wrong text past the text gate; `text_overlap` compares cells as multisets, so right texts in
wrong places pass it (the render then differs).
"""

from __future__ import annotations

import functools
import re
from collections import Counter

import numpy as np

from covey.rewards._scoring import RewardOutput
from covey.rewards.math import completion_text
from covey.rewards.registry import register_reward

__all__ = ["TableRender", "TableTeds", "TableTooLarge", "cell_texts", "cw_ssim", "ink_crop", "latex_grid", "same_canvas",
           "teds_structure", "text_overlap"]

_COMMENT = re.compile(r"(?<!\\)%.*$", re.MULTILINE)
_ROWSKIP = re.compile(r"(?<!\\)\\\\\[.*?\]", re.DOTALL)
_TABULAR = re.compile(r"\\begin\{tabular[x]*\*?\}.*?\\end\{tabular[x]*\*?\}", re.DOTALL)
_RULES = re.compile(
    r"\\cmidrule{\s*}|\\cdashline\{[0-9]+(-[0-9]+)?\}\s*|\\cmidrule\((?:lr|r|l)?\)\{[0-9]+\-[0-9]+\}\s*|"
    r"\\arrayrulecolor{.*?}\s*|\\caption{.*?}\s*|\\centering\s*|\\hline\s*|\\cline{.*?}\s*|\\toprule\s*|"
    r"\\midrule\s*|\\bottomrule\s*"
)
_MULTIROW = re.compile(r"\\multirow{(\d+)}{.*?}{(.*?)}")
_MULTICOL = re.compile(r"\\multicolumn{(\d+)}{.*?}{(.*?)}")
_CELL_SPLIT = re.compile(r"(?<!\\)&")
_DOWN, _RIGHT = "^^", "<<"  # grid slots covered by a cell above / to the left


class TableTooLarge(ValueError):
    """A table whose grid (or one span) is over the cell bound: refused before the grid is allocated."""


def _span(digits: str, max_cells: int) -> int:
    if len(digits) > 9 or int(digits) > max_cells:  # int() of 4,300+ digits raises; 10^9 slots exhaust memory
        raise TableTooLarge(f"a span of {digits[:12]}{'...' if len(digits) > 12 else ''} cells")
    return int(digits)


def _cell(text: str, max_cells: int) -> tuple[str, int, int]:
    """(content, rowspan, colspan) of one cell: its first \\multirow, then its first \\multicolumn."""
    rowspan = colspan = 1
    for pattern in (_MULTIROW, _MULTICOL):
        m = pattern.search(text)
        if m:
            if pattern is _MULTIROW:
                rowspan = _span(m.group(1), max_cells)
            else:
                colspan = _span(m.group(1), max_cells)
            text = text.replace(m.group(0), m.group(2).strip(), 1).strip()
    return text, rowspan, colspan


def latex_grid(latex: str, max_cells: int = 2000) -> list[list[str]] | None:
    r"""The first tabular of `latex` as a grid of cell texts and span markers; None without a table.
    `TableTooLarge` when a span, or the grid, would hold more than `max_cells` slots (checked before the
    slots are allocated, so ``\multicolumn{1000000000}`` costs nothing).

    >>> latex_grid(r"\begin{tabular}{cc}\hline \multicolumn{2}{c}{T}\\ a & b\\ \end{tabular}")
    [['\\begin{tabular}{cc}T', '<<'], ['a', 'b'], ['\\end{tabular}', '']]
    """
    latex = _ROWSKIP.sub("", _COMMENT.sub("", latex)).replace("\n", "").replace("\t", "")
    m = _TABULAR.search(latex)
    if m is None:
        return None
    body = _RULES.sub("", m.group(0)).replace("\\tabularnewline", "\\\\")
    body = re.sub(r"\n\s*\n", "\n", body).strip(" \n")
    rows = [[_cell(c.strip(" \n"), max_cells) for c in _CELL_SPLIT.split(r)] for r in body.split("\\\\") if r.strip()]
    if not rows:
        return None
    width = max(sum(c[2] for c in row) for row in rows)
    if width * len(rows) > max_cells:
        raise TableTooLarge(f"{len(rows)} rows of {width} columns")
    grid: list[list[str | None]] = [[None] * width for _ in rows]

    def grow(r: int) -> None:  # rows that \multirow spans add are bounded too
        while r >= len(grid):
            if (len(grid) + 1) * width > max_cells:
                raise TableTooLarge(f"more than {max_cells // width} rows of {width} columns")
            grid.append([None] * width)

    shift = 0
    for i, row in enumerate(rows):
        r = i + shift
        grow(r)
        c, least_rowspan = 0, 10000
        for text, rowspan, colspan in row:
            while c < width and grid[r][c] is not None:
                c += 1
            if c >= width:
                break
            least_rowspan = min(least_rowspan, rowspan)
            grid[r][c] = text
            for dr in range(rowspan):
                grow(r + dr)
                for dc in range(min(colspan, width - c)):
                    if dr or dc:
                        grid[r + dr][c + dc] = _DOWN if dr > 0 else _RIGHT
            c += colspan
        shift += least_rowspan - 1  # the reference's rule: a row whose cells all span down shifts the next ones
    return [[x if x is not None else "" for x in row] for row in grid]


class _Node:
    __slots__ = ("tag", "colspan", "rowspan", "children")

    def __init__(self, tag, colspan=None, rowspan=None, children=()):
        self.tag, self.colspan, self.rowspan, self.children = tag, colspan, rowspan, list(children)


def _tree(grid: list[list[str]]) -> tuple[_Node, int]:
    """(table > tr > td tree, #tr + #td): one td per grid slot that is not covered, spans counted over markers."""
    rows, n = [], 0
    for r, row in enumerate(grid):
        cells = []
        for c, x in enumerate(row):
            if x in (_DOWN, _RIGHT, ".."):
                continue
            rowspan = 1
            while r + rowspan < len(grid) and grid[r + rowspan][c] == _DOWN:
                rowspan += 1
            colspan = 1
            while c + colspan < len(row) and row[c + colspan] == _RIGHT:
                colspan += 1
            cells.append(_Node("td", colspan, rowspan))
        rows.append(_Node("tr", children=cells))
        n += 1 + len(cells)
    return _Node("table", children=rows), n


def _apted():
    from apted import APTED, Config  # the `table2latex` extra

    class _Spans(Config):
        def rename(self, a, b):
            return int(a.tag != b.tag or a.colspan != b.colspan or a.rowspan != b.rowspan)

    return APTED, _Spans()


def teds_structure(pred: str, ref: str, max_cells: int = 2000, floor: float | None = None) -> float | None:
    r"""TEDS-S of the completion's first table against the reference's (module docstring); 0.0 when the
    completion has no table or either grid has more than `max_cells` cells; None when the reference has none.
    With `floor`, a pair whose node counts alone keep TEDS-S below it is 0.0 without the edit distance
    (every node of the larger tree that is not mapped costs 1, so TEDS-S <= min(n) / max(n)).

    >>> ref = r"\begin{tabular}{cc} a & b \\ c & d \\ \end{tabular}"
    >>> teds_structure(ref, ref), teds_structure(r"\begin{tabular}{cc} a & b \\ \end{tabular}", ref)  # 3 of 9 nodes deleted
    (1.0, 0.6666666666666667)
    """
    return _teds(pred, ref, max_cells, floor)[0]


def _teds(pred: str, ref: str, max_cells: int, floor: float | None) -> tuple[float | None, str]:
    """(TEDS-S or None, why it was not computed: "" | no_table | too_large | reference_too_large | size_bound)."""
    try:
        g_ref = latex_grid(ref, max_cells)
    except TableTooLarge:
        return 0.0, "reference_too_large"
    if g_ref is None:
        return None, ""
    try:
        g_pred = latex_grid(pred, max_cells)
    except TableTooLarge:
        return 0.0, "too_large"
    if g_pred is None:
        return 0.0, "no_table"
    g_pred, g_ref = tuple(map(tuple, g_pred)), tuple(map(tuple, g_ref))
    if floor is not None:
        n_pred, n_ref = _tree(g_pred)[1], _tree(g_ref)[1]
        if min(n_pred, n_ref) / max(n_pred, n_ref) < floor:
            return 0.0, "size_bound"
    return _teds_cached(g_pred, g_ref), ""


@functools.lru_cache(maxsize=4096)
def _teds_cached(g_pred, g_ref) -> float:
    (t_pred, n_pred), (t_ref, n_ref) = _tree(g_pred), _tree(g_ref)
    apted, config = _apted()
    dist = apted(t_pred, t_ref, config).compute_edit_distance()
    return 1.0 - float(dist) / max(n_pred, n_ref)


def _haar(img: np.ndarray, arithmetic: str) -> list[np.ndarray]:
    h, w = img.shape[0] // 2 * 2, img.shape[1] // 2 * 2
    x = img[:h, :w] if arithmetic == "uint8" else img[:h, :w].astype(np.float64)
    blocks = x.reshape(h // 2, 2, w // 2, 2).transpose(0, 2, 1, 3)
    a, b, c, d = blocks[..., 0, 0], blocks[..., 0, 1], blocks[..., 1, 0], blocks[..., 1, 1]
    return [(a + b + c + d) * 0.25, (a - c) * 0.5, (a - b) * 0.5, (a - d) * 0.5]


def _ssim(x: np.ndarray, y: np.ndarray) -> float:
    x, y = x.ravel().astype(np.float64), y.ravel().astype(np.float64)
    if x.std() < 1e-6 and y.std() < 1e-6:
        return 1.0 if x.mean() == y.mean() else 0.0
    mx, my = x.mean(), y.mean()
    cov = np.cov(x, y)[0, 1]
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    s = (2 * mx * my + c1) * (2 * cov + c2) / ((mx**2 + my**2 + c1) * (x.var() + y.var() + c2))
    return float(min(1.0, max(0.0, s)))


def cw_ssim(img: np.ndarray, ref: np.ndarray, arithmetic: str = "uint8") -> float:
    """The reference's CW-SSIM of two uint8 gray images of one size (module docstring).

    >>> flat = np.full((4, 4), 200, np.uint8)
    >>> cw_ssim(flat, flat), cw_ssim(flat, np.zeros((4, 4), np.uint8))
    (1.0, 0.75)
    """
    if img.shape != ref.shape:
        raise ValueError(f"cw_ssim: images differ in size, {img.shape} vs {ref.shape}")
    return float(np.mean([_ssim(p, q) for p, q in zip(_haar(img, arithmetic), _haar(ref, arithmetic))]))


_BEGIN = re.compile(r"\\begin\{tabular(x|\*)?\}\s*(\[[^\]]*\])?")
_END = re.compile(r"\\end\{tabular[x]*\*?\}")
_COMMAND = re.compile(r"\\[a-zA-Z@]+\*?")
_NOISE = re.compile(r"[\\{}$~\s]+")


def _skip_groups(text: str, n: int) -> str:
    """`text` after its first `n` balanced {...} groups (the tabular's column spec)."""
    at = 0
    for _ in range(n):
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text) or text[at] != "{":
            return text[at:]
        depth = 0
        for j in range(at, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                at = j + 1
                break
        else:
            return ""
    return text[at:]


def cell_texts(grid: list[list[str]]) -> list[str]:
    r"""The non-empty cell texts of a grid, normalised: no tabular begin / end, no command names, braces, $, ~,
    backslashes or spaces (``\textbf{Total \%}`` -> ``Total%``).

    >>> cell_texts(latex_grid(r"\begin{tabular}{|c|}\textbf{Total \%} \\ $x_1$ \\ \end{tabular}"))
    ['Total%', 'x_1']
    """
    out = []
    for r, row in enumerate(grid):
        for c, x in enumerate(row):
            if x in (_DOWN, _RIGHT):
                continue
            if r == 0 and c == 0:
                m = _BEGIN.match(x)
                if m:
                    x = _skip_groups(x[m.end():], 2 if m.group(1) else 1)
            x = _NOISE.sub("", _COMMAND.sub("", _END.sub("", x)))
            if x:
                out.append(x)
    return out


def text_overlap(pred: list[str], ref: list[str]) -> float:
    """Cells of `pred` matched one-to-one by equal cells of `ref` (multisets), over the larger count; 1.0 when
    both have none.

    >>> text_overlap(["a", "b", "b"], ["b", "a", "c", "d"])  # a and one b match: 2 of 4
    0.5
    """
    if not pred and not ref:
        return 1.0
    return sum((Counter(pred) & Counter(ref)).values()) / max(len(pred), len(ref))


def ink_crop(page: np.ndarray, level: int = 250) -> np.ndarray | None:
    """The page cut to the bounding box of its ink (pixels darker than `level`); None for a blank page.

    >>> ink_crop(np.array([[255, 255, 255], [255, 0, 255], [255, 255, 100]], np.uint8)).tolist()
    [[0, 255], [255, 100]]
    """
    ink = page < level
    rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
    if rows.size == 0:
        return None
    return page[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]


def same_canvas(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both images on one white canvas of the larger height and width (at least 2 x 2), at their top left:
    no resampling, so a smaller table stays smaller."""
    h, w = max(a.shape[0], b.shape[0], 2), max(a.shape[1], b.shape[1], 2)
    out = []
    for x in (a, b):
        canvas = np.full((h, w), 255, np.uint8)
        canvas[: x.shape[0], : x.shape[1]] = x
        out.append(canvas)
    return out[0], out[1]


def _references(reference_column: str, columns: dict) -> list:
    refs = columns.get(reference_column)
    if refs is None:
        raise ValueError(f"table reward: the batch has no column {reference_column!r} (the reference LaTeX)")
    return list(refs)


@register_reward("table_teds")
class TableTeds:
    """Table2LaTeX-RL's structure ("format") reward: 1.0 when TEDS-S > threshold (0.9), else 0.0.

    reference_column: the item column with the reference LaTeX (default `answer`).
    threshold: null scores TEDS-S itself (a dense variant; the reference's reward is binary).
    max_cells: a table whose grid (or a span) is larger scores 0.0 (`too_large_frac`), refused before it is built.
    A row whose reference has no tabular: None (the reward does not apply).
    """

    def __init__(self, reference_column: str = "answer", threshold: float | None = 0.9, max_cells: int = 2000):
        _apted()  # a missing `apted` is a config error, not a failure per sample
        if threshold is not None and not 0.0 <= threshold < 1.0:
            raise ValueError(f"table_teds: threshold must be in [0, 1) or null, got {threshold}")
        if max_cells < 1:
            raise ValueError(f"table_teds: max_cells must be >= 1, got {max_cells}")
        self.reference_column, self.threshold, self.max_cells = reference_column, threshold, int(max_cells)
        self.__name__ = "table_teds"

    def __call__(self, prompts, completions, **columns) -> RewardOutput:
        refs = _references(self.reference_column, columns)
        teds = [_teds(completion_text(c), str(r), self.max_cells, self.threshold) for c, r in zip(completions, refs)]
        scores = [None if t is None else (t if self.threshold is None else float(t > self.threshold)) for t, _ in teds]
        seen = [why for t, why in teds if t is not None]
        return RewardOutput(scores, {"teds_s": [t for t, _ in teds if t is not None],
                                     **_why_fractions(seen, ("no_table", "too_large", "reference_too_large"))})


def _why_fractions(whys: list[str], kinds: tuple[str, ...]) -> dict[str, list[float]]:
    return {f"{k}_frac": [float(w == k) for w in whys] for k in kinds} if whys else {}


@register_reward("table_render")
class TableRender:
    """Table2LaTeX-RL's visual ("accuracy") reward: 0.0 below the TEDS-S gate (0.3) or the cell-text gate (0.5);
    else both tables rendered in the sandbox, cut to their ink, and 1.0 when CW-SSIM > threshold (0.6), else 0.0.

    reference_column: the item column with the reference LaTeX (default `answer`).
    teds_gate: TEDS-S below it scores 0.0 without rendering (0 renders every table).
    text_gate: `text_overlap` of the normalised cell texts below it scores 0.0 without rendering (0: no check).
    threshold: null scores CW-SSIM itself (a dense variant).
    arithmetic: `uint8` (the reference's Haar bands, sums wrap modulo 256) | `float` (covey's variant).
    dpi (300), timeout_s (30, per render), memory_mb (1024, per process), max_cells (as table_teds).
    Needs pdflatex + pdftoppm + the preamble's packages + bubblewrap: checked when the reward is built.
    """

    def __init__(self, reference_column: str = "answer", teds_gate: float = 0.3, threshold: float | None = 0.6,
                 arithmetic: str = "uint8", dpi: int = 300, timeout_s: float = 30.0, memory_mb: int = 1024,
                 max_cells: int = 2000, text_gate: float = 0.5):  # fmt: skip
        from covey.rewards.latex_render import tex_status

        _apted()
        if arithmetic not in ("uint8", "float"):
            raise ValueError(f"table_render: arithmetic must be uint8 or float, got {arithmetic!r}")
        if not 0.0 <= teds_gate <= 1.0 or not 0.0 <= text_gate <= 1.0 or (threshold is not None and not 0.0 <= threshold < 1.0):
            raise ValueError(f"table_render: teds_gate and text_gate must be in [0, 1] and threshold in [0, 1) or null, "
                             f"got {teds_gate}, {text_gate}, {threshold}")  # fmt: skip
        if not 30 <= dpi <= 600 or timeout_s <= 0 or memory_mb < 256 or max_cells < 1:
            raise ValueError(f"table_render: needs 30 <= dpi <= 600, timeout_s > 0, memory_mb >= 256, max_cells >= 1; "
                             f"got {dpi}, {timeout_s}, {memory_mb}, {max_cells}")  # fmt: skip
        ok, why = tex_status()
        if not ok:
            raise ValueError(f"table_render cannot render LaTeX here: {why}")
        self.reference_column, self.teds_gate, self.threshold = reference_column, teds_gate, threshold
        self.arithmetic, self.dpi, self.timeout_s, self.memory_mb = arithmetic, int(dpi), float(timeout_s), int(memory_mb)
        self.max_cells, self.text_gate = int(max_cells), float(text_gate)
        self.__name__ = "table_render"

    def _render(self, latex: str) -> tuple[np.ndarray | None, str]:
        """The table's ink (the page cut to its bounding box), or None and why (a failed render, a blank page)."""
        from covey.rewards.latex_render import render_table

        page, why = render_table(latex, self.dpi, self.timeout_s, self.memory_mb)
        if page is None:
            return None, why
        ink = ink_crop(page)
        return (ink, "") if ink is not None else (None, "blank")

    def __call__(self, prompts, completions, **columns) -> RewardOutput:
        refs = _references(self.reference_column, columns)
        scores, cw, whys, ref_failed = [], [], [], 0
        ref_inks: dict[str, np.ndarray | None] = {}
        for c, ref in zip(completions, refs):
            text, ref = completion_text(c), str(ref)
            t, why = _teds(text, ref, self.max_cells, self.teds_gate)
            if t is None:
                scores.append(None)
                continue
            if t < self.teds_gate:
                scores.append(0.0)
                whys.append(why if why in ("too_large", "reference_too_large") else "gated")
                continue
            overlap = text_overlap(cell_texts(latex_grid(text, self.max_cells)), cell_texts(latex_grid(ref, self.max_cells)))
            if overlap < self.text_gate:
                scores.append(0.0)
                whys.append("text_gated")
                continue
            if ref not in ref_inks:
                ref_inks[ref] = self._render(ref)[0]
            if ref_inks[ref] is None:
                ref_failed += 1
                scores.append(None)
                continue
            ink, why = self._render(text)
            whys.append("blank" if why == "blank" else "compile_fail" if ink is None else "rendered")
            if ink is None:
                scores.append(0.0)
                continue
            s = cw_ssim(*same_canvas(ink, ref_inks[ref]), self.arithmetic)
            cw.append(s)
            scores.append(s if self.threshold is None else float(s > self.threshold))
        metrics = _why_fractions(whys, ("gated", "too_large", "reference_too_large", "text_gated", "compile_fail", "blank"))
        metrics.update(cw_ssim=cw, reference_render_failures=[float(ref_failed)])
        return RewardOutput(scores, {k: v for k, v in metrics.items() if v})
