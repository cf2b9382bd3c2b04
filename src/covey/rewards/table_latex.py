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
    table_render  (the "accuracy" reward): 0.0 if TEDS-S < 0.3 (not rendered); else both tables rendered
                  (`covey.rewards.latex_render`: pdflatex in the sandbox, page 1 at 300 dpi, gray), the
                  completion's page resized to the reference's (bicubic), CW-SSIM below;
                  1.0 if CW-SSIM > 0.6 else 0.0; a completion that does not compile: 0.0

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
(an HTML-looking cell text such as "<b>" no longer adds nodes); grids over `max_cells` cells score 0 (the
reference has no bound; APTED's cost grows fast); the reference's GPU path computes SSIM with an unbiased
variance, covey always uses the CPU formula; pdftoppm's gray output replaces PIL's RGB -> L conversion.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from covey.rewards._scoring import RewardOutput
from covey.rewards.math import completion_text
from covey.rewards.registry import register_reward

__all__ = ["TableRender", "TableTeds", "cw_ssim", "latex_grid", "teds_structure"]

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


def _cell(text: str) -> tuple[str, int, int]:
    """(content, rowspan, colspan) of one cell: its first \\multirow, then its first \\multicolumn."""
    rowspan = colspan = 1
    for pattern in (_MULTIROW, _MULTICOL):
        m = pattern.search(text)
        if m:
            if pattern is _MULTIROW:
                rowspan = int(m.group(1))
            else:
                colspan = int(m.group(1))
            text = text.replace(m.group(0), m.group(2).strip(), 1).strip()
    return text, rowspan, colspan


def latex_grid(latex: str) -> list[list[str]] | None:
    r"""The first tabular of `latex` as a grid of cell texts and span markers; None without a table.

    >>> latex_grid(r"\begin{tabular}{cc}\hline \multicolumn{2}{c}{T}\\ a & b\\ \end{tabular}")
    [['\\begin{tabular}{cc}T', '<<'], ['a', 'b'], ['\\end{tabular}', '']]
    """
    latex = _ROWSKIP.sub("", _COMMENT.sub("", latex)).replace("\n", "").replace("\t", "")
    m = _TABULAR.search(latex)
    if m is None:
        return None
    body = _RULES.sub("", m.group(0)).replace("\\tabularnewline", "\\\\")
    body = re.sub(r"\n\s*\n", "\n", body).strip(" \n")
    rows = [[_cell(c.strip(" \n")) for c in _CELL_SPLIT.split(r)] for r in body.split("\\\\") if r.strip()]
    if not rows:
        return None
    width = max(sum(c[2] for c in row) for row in rows)
    grid: list[list[str | None]] = [[None] * width for _ in rows]
    shift = 0
    for i, row in enumerate(rows):
        r = i + shift
        while r >= len(grid):
            grid.append([None] * width)
        c, least_rowspan = 0, 10000
        for text, rowspan, colspan in row:
            while c < width and grid[r][c] is not None:
                c += 1
            if c >= width:
                break
            least_rowspan = min(least_rowspan, rowspan)
            grid[r][c] = text
            for dr in range(rowspan):
                for dc in range(colspan):
                    if dr == dc == 0:
                        continue
                    while r + dr >= len(grid):
                        grid.append([None] * width)
                    if c + dc < width:
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


def teds_structure(pred: str, ref: str, max_cells: int = 2000) -> float | None:
    r"""TEDS-S of the completion's first table against the reference's (module docstring); 0.0 when the
    completion has no table or either grid has more than `max_cells` cells; None when the reference has none.

    >>> ref = r"\begin{tabular}{cc} a & b \\ c & d \\ \end{tabular}"
    >>> teds_structure(ref, ref), teds_structure(r"\begin{tabular}{cc} a & b \\ \end{tabular}", ref)  # 3 of 9 nodes deleted
    (1.0, 0.6666666666666667)
    """
    g_ref = latex_grid(ref)
    if g_ref is None:
        return None
    g_pred = latex_grid(pred)
    if g_pred is None or max(len(g) * len(g[0]) for g in (g_pred, g_ref)) > max_cells:
        return 0.0
    return _teds_cached(tuple(map(tuple, g_pred)), tuple(map(tuple, g_ref)))


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
    max_cells: larger tables score 0.0 (tree edit distance cost).
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
        teds = [teds_structure(completion_text(c), str(r), self.max_cells) for c, r in zip(completions, refs)]
        scores = [None if t is None else (t if self.threshold is None else float(t > self.threshold)) for t in teds]
        seen = [t for t in teds if t is not None]
        return RewardOutput(scores, {"teds_s": seen, "no_table_frac": [float(latex_grid(completion_text(c)) is None)
                                                                      for c in completions]})  # fmt: skip


@register_reward("table_render")
class TableRender:
    """Table2LaTeX-RL's visual ("accuracy") reward: 0.0 below the TEDS-S gate (0.3); else both tables rendered in
    the sandbox and 1.0 when CW-SSIM > threshold (0.6), else 0.0.

    reference_column: the item column with the reference LaTeX (default `answer`).
    teds_gate: TEDS-S below it scores 0.0 without rendering (0 renders every table).
    threshold: null scores CW-SSIM itself (a dense variant).
    arithmetic: `uint8` (the reference's Haar bands, sums wrap modulo 256) | `float` (covey's variant).
    dpi (300), timeout_s (30, per render), memory_mb (1024, per process), max_cells (as table_teds).
    Needs pdflatex + pdftoppm + the preamble's packages + bubblewrap: checked when the reward is built.
    """

    def __init__(self, reference_column: str = "answer", teds_gate: float = 0.3, threshold: float | None = 0.6,
                 arithmetic: str = "uint8", dpi: int = 300, timeout_s: float = 30.0, memory_mb: int = 1024,
                 max_cells: int = 2000):  # fmt: skip
        from covey.rewards.latex_render import tex_status

        _apted()
        if arithmetic not in ("uint8", "float"):
            raise ValueError(f"table_render: arithmetic must be uint8 or float, got {arithmetic!r}")
        if not 0.0 <= teds_gate <= 1.0 or (threshold is not None and not 0.0 <= threshold < 1.0):
            raise ValueError(f"table_render: teds_gate must be in [0, 1] and threshold in [0, 1) or null, got "
                             f"{teds_gate}, {threshold}")  # fmt: skip
        if not 30 <= dpi <= 600 or timeout_s <= 0 or memory_mb < 256:
            raise ValueError(f"table_render: needs 30 <= dpi <= 600, timeout_s > 0, memory_mb >= 256; got {dpi}, "
                             f"{timeout_s}, {memory_mb}")  # fmt: skip
        ok, why = tex_status()
        if not ok:
            raise ValueError(f"table_render cannot render LaTeX here: {why}")
        self.reference_column, self.teds_gate, self.threshold = reference_column, teds_gate, threshold
        self.arithmetic, self.dpi, self.timeout_s, self.memory_mb = arithmetic, int(dpi), float(timeout_s), int(memory_mb)
        self.max_cells = int(max_cells)
        self.__name__ = "table_render"

    def _render(self, latex: str):
        from covey.rewards.latex_render import render_table

        return render_table(latex, self.dpi, self.timeout_s, self.memory_mb)

    def __call__(self, prompts, completions, **columns) -> RewardOutput:
        from PIL import Image

        refs = _references(self.reference_column, columns)
        scores, cw, gated, failed, ref_failed = [], [], [], [], 0
        ref_pages: dict[str, np.ndarray | None] = {}
        for c, ref in zip(completions, refs):
            text, ref = completion_text(c), str(ref)
            t = teds_structure(text, ref, self.max_cells)
            if t is None:
                scores.append(None)
                continue
            gated.append(float(t < self.teds_gate))
            if t < self.teds_gate:
                scores.append(0.0)
                continue
            if ref not in ref_pages:
                ref_pages[ref] = self._render(ref)[0]
            page_ref = ref_pages[ref]
            if page_ref is None:
                ref_failed += 1
                scores.append(None)
                continue
            page, _ = self._render(text)
            failed.append(float(page is None))
            if page is None:
                scores.append(0.0)
                continue
            if page.shape != page_ref.shape:
                size = (page_ref.shape[1], page_ref.shape[0])
                page = np.asarray(Image.fromarray(page).resize(size, Image.Resampling.BICUBIC))
            s = cw_ssim(page, page_ref, self.arithmetic)
            cw.append(s)
            scores.append(s if self.threshold is None else float(s > self.threshold))
        metrics = {"gated_frac": gated, "compile_fail_frac": failed, "cw_ssim": cw,
                   "reference_render_failures": [float(ref_failed)]}  # fmt: skip
        return RewardOutput(scores, {k: v for k, v in metrics.items() if v})
