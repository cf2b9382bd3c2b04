"""Table2LaTeX-RL's rewards: the reference's LaTeX grid, TEDS-S by hand, its CW-SSIM, the thresholds and gate,
and the sandboxed render (skipped without pdflatex / pdftoppm / bubblewrap)."""

import numpy as np
import pytest

pytest.importorskip("apted", reason="the table2latex extra (apted) is not installed")

from covey.rewards import get_reward  # noqa: E402
from covey.rewards.table_latex import cw_ssim, latex_grid, teds_structure  # noqa: E402

REF = r"\begin{tabular}{|c|c|c|}\hline \multicolumn{2}{c}{AB} & C \\ \hline 1 & 2 & 3 \\ 4 & 5 & 6 \\ \hline\end{tabular}"


def test_grid_follows_the_reference_parser():
    assert latex_grid(REF) == [[r"\begin{tabular}{|c|c|c|}AB", "<<", "C"], ["1", "2", "3"], ["4", "5", "6"],
                               [r"\end{tabular}", "", ""]]  # fmt: skip
    # the comment eats the first row break and "\\[2pt]" the second; X spans down, so \end{tabular} moves right
    g = latex_grid("\\begin{tabular}{cc} % c & c \\\\\n\\multirow{2}{*}{X} & a \\\\[2pt] & b \\\\ \\end{tabular}")
    assert g == [[r"\begin{tabular}{cc} X", "a", "b"], ["^^", r"\end{tabular}", ""]]
    assert latex_grid(r"\begin{tabularx}{5cm}{XX} a & b \tabularnewline \end{tabularx}") == [
        [r"\begin{tabularx}{5cm}{XX} a", "b"], [r"\end{tabularx}", ""]]  # fmt: skip
    assert latex_grid("no table") is None and latex_grid(r"\begin{tabular}{c} a") is None


def test_teds_structure_by_hand():
    # REF's tree: 4 tr + (2 + 3 + 3 + 3) td = 15 nodes
    assert teds_structure(REF, REF) == 1.0
    no_span = REF.replace(r"\multicolumn{2}{c}{AB}", "A & B")  # rename the spanning td, insert one td: 2 edits
    assert teds_structure(no_span, REF) == pytest.approx(1 - 2 / 16)
    one_row_less = REF.replace(r"4 & 5 & 6 \\ ", "")  # delete a tr and its 3 td: 4 edits of 15
    assert teds_structure(one_row_less, REF) == pytest.approx(1 - 4 / 15)
    assert teds_structure("I cannot draw tables", REF) == 0.0
    assert teds_structure(REF, "no reference table") is None
    # cell text is ignored; \hline / \toprule make no difference
    assert teds_structure(REF.replace("5", "five").replace(r"\hline", r"\toprule"), REF) == 1.0
    assert teds_structure(REF, REF, max_cells=11) == 0.0  # 4 x 3 slots > 11


def test_cw_ssim_is_the_references_haar_ssim():
    flat = np.full((4, 4), 200, np.uint8)
    assert cw_ssim(flat, flat) == 1.0
    # uint8 bands: A = (4 * 200 mod 256) / 4 = 8 vs 0 (flat, different: 0); H, V, D flat and equal (1)
    assert cw_ssim(flat, np.zeros((4, 4), np.uint8)) == pytest.approx(0.75)
    assert cw_ssim(flat, np.zeros((4, 4), np.uint8), "float") == pytest.approx(0.75)  # A = 200 vs 0: still 0
    # two blocks, A = [10, 30] vs [10, 50], H = V = D = 0: means 20, 30; biased variances 100, 400; the
    # covariance is unbiased (400): (2*20*30 + C1)(2*400 + C2) / ((20^2 + 30^2 + C1)(100 + 400 + C2)) = 1.42 -> 1
    x = np.array([[10, 10, 30, 30]] * 2, np.uint8)
    y = np.array([[10, 10, 50, 50]] * 2, np.uint8)
    assert cw_ssim(x, y) == 1.0
    assert cw_ssim(x, x[:, ::-1].copy()) == pytest.approx(0.75)  # A = [30, 10]: covariance -200, clamped to 0
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (20, 30), dtype=np.uint8)
    assert cw_ssim(img, img) == pytest.approx(1.0) and cw_ssim(img, 255 - img, "float") < 0.5
    with pytest.raises(ValueError, match="size"):
        cw_ssim(img, img[:10])


def _reference_cwssim(img1, img2):
    """Transcription of newLLing/Table2LaTeX-RL cw_ssim.ipynb (`dwt2_simple`, `calculate_ssim`, the mean of the
    four band SSIMs), on arrays as PIL gives them (uint8: the band sums wrap modulo 256)."""

    def dwt2(x):
        r, c = x.shape[0] - x.shape[0] % 2, x.shape[1] - x.shape[1] % 2
        blocks = x[:r, :c].reshape(r // 2, 2, c // 2, 2).transpose(0, 2, 1, 3)
        a, b, c_, d = blocks[..., 0, 0], blocks[..., 0, 1], blocks[..., 1, 0], blocks[..., 1, 1]
        return (a + b + c_ + d) * 0.25, (a - c_) * 0.5, (a - b) * 0.5, (a - d) * 0.5

    def ssim(x, y):
        x, y = x.ravel().astype(np.float64), y.ravel().astype(np.float64)
        n = x.size
        m1, m2 = x.sum() / n, y.sum() / n
        v1, v2 = (np.sum(x**2) - x.sum() ** 2 / n) / n, (np.sum(y**2) - y.sum() ** 2 / n) / n
        cov = (np.sum(x * y) - x.sum() * y.sum() / n) / (n - 1)
        return (2 * m1 * m2 + 6.5025) * (2 * cov + 58.5225) / ((m1**2 + m2**2 + 6.5025) * (v1 + v2 + 58.5225))

    bands = [ssim(p, q) for p, q in zip(dwt2(img1), dwt2(img2))]
    assert all(0 < b < 1 for b in bands)  # no clamp and no flat band: covey's guards do not act here
    return sum(bands) / 4


def test_cw_ssim_band_scales_match_the_reference_transform():
    # every band scale (A 1/4, H V D 1/2) changes the SSIM through C1, C2: a scale mutation changes the value
    rng = np.random.default_rng(3)
    img = rng.integers(40, 90, (9, 11), dtype=np.uint8)  # odd sizes: the last row and column are dropped
    ref = np.clip(img.astype(int) + rng.integers(-20, 21, img.shape), 0, 255).astype(np.uint8)
    assert cw_ssim(img, ref) == pytest.approx(_reference_cwssim(img, ref), rel=1e-9)
    assert cw_ssim(img, ref, "float") == pytest.approx(_reference_cwssim(img.astype(np.float64), ref.astype(np.float64)), rel=1e-9)


def test_table_teds_reward_thresholds_and_metrics():
    fn = get_reward("table_teds")
    out = fn(prompts=["p"] * 4, completions=[REF, REF.replace(r"4 & 5 & 6 \\ ", ""), "none", REF],
             answer=[REF, REF, REF, "no table"])  # fmt: skip
    assert list(out) == [1.0, 0.0, 0.0, None]  # 1 - 4/15 = 0.73 is not > 0.9
    assert out.metrics["no_table_frac"] == [0.0, 0.0, 1.0, 0.0]
    dense = get_reward("table_teds", threshold=None)
    assert dense(prompts=["p"], completions=[REF.replace(r"4 & 5 & 6 \\ ", "")], answer=[REF]) == [pytest.approx(11 / 15)]
    chat = [{"role": "assistant", "content": "Here it is:\n" + REF}]
    assert fn(prompts=["p"], completions=[chat], answer=[REF]) == [1.0]
    with pytest.raises(ValueError, match="threshold"):
        get_reward("table_teds", threshold=1.5)
    with pytest.raises(ValueError, match="column 'latex'"):
        get_reward("table_teds", reference_column="latex")(prompts=["p"], completions=[REF], answer=[REF])


# ------------------------------------------------------------------ the render (needs TeX)
def _tex():
    from covey.rewards.latex_render import tex_status

    ok, why = tex_status()
    if not ok:
        pytest.skip(f"no LaTeX toolchain: {why}")


def test_table_render_refuses_at_build_time_without_tex(monkeypatch):
    import covey.rewards.latex_render as lr

    monkeypatch.setattr(lr, "tex_status", lambda: (False, "pdflatex not found"))
    with pytest.raises(ValueError, match="cannot render LaTeX here: pdflatex not found"):
        get_reward("table_render")
    monkeypatch.setattr(lr, "tex_status", lambda: (True, "test"))
    with pytest.raises(ValueError, match="arithmetic"):
        get_reward("table_render", arithmetic="int")


def test_render_is_contained(tmp_path):
    _tex()
    from covey.rewards.latex_render import render_table

    page, why = render_table(r"\begin{tabular}{cc} a & b \\ \end{tabular}", dpi=72)
    assert why == "" and page.shape == (792, 612) and page.dtype == np.uint8 and page.min() < 100  # letter, ink
    secret = tmp_path / "secret.tex"
    secret.write_text(r"\begin{tabular}{c} SECRET \end{tabular}")
    page, why = render_table(r"\input{" + str(secret) + "}", dpi=72)  # absolute paths: refused, and not mounted
    assert page is None and why == "no_pdf"
    out = tmp_path / "written"
    evil = (r"\immediate\write18{touch " + str(out) + r"}\newwrite\f\immediate\openout\f=" + str(out) + r".tex"
            r"\immediate\write\f{x}\immediate\closeout\f\begin{tabular}{c} a \end{tabular}")  # fmt: skip
    render_table(evil, dpi=72)
    assert not out.exists() and not (tmp_path / "written.tex").exists()
    page, why = render_table(r"\def\x{\x}\x", dpi=72, timeout_s=3)
    assert page is None and why == "timeout"


def test_table_render_scores_gate_and_threshold():
    _tex()
    fn = get_reward("table_render", dpi=100)
    moved = REF.replace("AB", "A very long header cell that moves the whole table")
    no_span = REF.replace(r"\multicolumn{2}{c}{AB}", "A & B")
    out = fn(prompts=["p"] * 4, completions=[REF, "no table", moved, r"\begin{tabular}{c} \x \end{tabular}"],
             answer=[REF] * 4)  # fmt: skip
    assert out[0] == 1.0 and out[1] == 0.0  # identical page: CW-SSIM 1; no table: gated
    assert out[3] == 0.0  # far from REF's structure: gated before rendering
    assert out.metrics["gated_frac"] == [0.0, 1.0, 0.0, 1.0] and out.metrics["cw_ssim"][0] == 1.0
    dense = get_reward("table_render", dpi=100, threshold=None, teds_gate=0.0)
    s = dense(prompts=["p"] * 3, completions=[REF, moved, no_span + r"\undefinedmacro"], answer=[REF] * 3)
    assert s[0] == 1.0 and 0.0 <= s[1] < 1.0 and 0.0 <= s[2] <= 1.0  # an undefined macro still gives a page
    broken = dense(prompts=["p"], completions=[REF + r"\input{no-such-file}"], answer=[REF])  # fatal in nonstopmode
    assert list(broken) == [0.0] and broken.metrics["compile_fail_frac"] == [1.0]


@pytest.mark.slow
def test_the_example_config_trains_one_step(tmp_path):
    """examples/judge/table2latex.yaml from the command line; without TeX it is refused with a one-line error."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from covey.rewards.latex_render import tex_status

    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "covey.cli", "train", str(root / "examples/judge/table2latex.yaml"), "steps=1",
           "log.progress=false", "log.tensorboard=false", "--run-dir", str(tmp_path / "run")]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=root)
    if not tex_status()[0]:
        assert out.returncode == 2 and "error:" in out.stderr and "table_render" in out.stderr, out.stderr[-2000:]
        return
    assert out.returncode == 0, out.stderr[-3000:]
    (row,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert row["reward/table_teds/failures"] == 0.0 and row["reward/table_render/failures"] == 0.0
    assert "reward/table_teds/no_table_frac" in row  # a random tiny model writes no tabular
