"""Table2LaTeX-RL's rewards: the reference's LaTeX grid, TEDS-S by hand, its CW-SSIM, the thresholds and gate,
and the sandboxed render (skipped without pdflatex / pdftoppm / bubblewrap)."""

import numpy as np
import pytest

pytest.importorskip("apted", reason="the table2latex extra (apted) is not installed")

from covey.rewards import get_reward  # noqa: E402
from covey.rewards.table_latex import (  # noqa: E402
    TableTooLarge,
    cell_texts,
    cw_ssim,
    ink_crop,
    latex_grid,
    same_canvas,
    teds_structure,
    text_overlap,
)

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
    assert out.metrics["no_table_frac"] == [0.0, 0.0, 1.0]  # over the rows the reward applies to
    # 11 nodes against 15 cannot give TEDS-S > 11/15 = 0.73, so no edit distance is computed: 0.0 in the metric
    assert out.metrics["teds_s"] == [1.0, 0.0, 0.0]
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


# ------------------------------------------------------------------ bounds (a table of 60 characters)
@pytest.mark.parametrize("table", [
    r"\begin{tabular}{c}\multicolumn{1000000000}{c}{x}\\\end{tabular}",  # 1e9 columns
    r"\begin{tabular}{c}\multirow{1000000000}{*}{x}\\\end{tabular}",  # 1e9 rows added by one span
    r"\begin{tabular}{c}\multicolumn{" + "9" * 5000 + r"}{c}{x}\\\end{tabular}",  # int() refuses 4,300+ digits
    r"\begin{tabular}{c}" + r"\multicolumn{40}{c}{x} & " * 40 + r"\\ a \\ b \\ \end{tabular}",  # 1,600 x 3 slots
])
def test_a_table_over_the_bound_is_refused_before_its_grid_is_built(table):
    with pytest.raises(TableTooLarge):
        latex_grid(table)
    assert teds_structure(table, REF) == 0.0 and teds_structure(REF, table) == 0.0
    out = get_reward("table_teds", threshold=None)(prompts=["p"] * 2, completions=[table, REF], answer=[REF] * 2)
    assert list(out) == [0.0, 1.0] and out.metrics["too_large_frac"] == [1.0, 0.0]


def test_the_bounded_parser_runs_in_little_memory_and_time():
    """In a process limited to 1 GiB of address space (the reward's memory limit is 1,024 MB): the spans above
    used to allocate 8 GB (MemoryError here; the OOM killer in a 2 GiB cgroup)."""
    import subprocess
    import sys
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "src"
    script = (
        "import resource, sys, time; sys.path.insert(0, %r)\n"
        "from covey.rewards.table_latex import teds_structure\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "t = time.time()\n"
        "for span in (r'\\multicolumn{1000000000}{c}{x}', r'\\multirow{1000000000}{*}{x}'):\n"
        "    assert teds_structure(r'\\begin{tabular}{c}' + span + r'\\\\\\end{tabular}', %r) == 0.0\n"
        "print(round(time.time() - t, 3))\n"
    ) % (str(src), REF)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout) < 1.0


def test_a_size_that_cannot_pass_skips_the_edit_distance(monkeypatch):
    import covey.rewards.table_latex as tl

    big = REF.replace(r"4 & 5 & 6 \\", r"4 & 5 & 6 \\ " * 12)  # 15 tr + (2 + 3 + 12 * 3 + 3) td = 59 nodes
    monkeypatch.setattr(tl, "_teds_cached", lambda *a: pytest.fail("APTED ran"))
    assert teds_structure(big, REF, floor=0.3) == 0.0  # TEDS-S <= 15 / 59 = 0.25 < 0.3
    monkeypatch.undo()
    assert teds_structure(big, REF) == pytest.approx(15 / 59)  # 44 nodes deleted: 1 - 44 / 59


# ------------------------------------------------------------------ what the render compares
def test_cell_texts_and_their_overlap():
    assert cell_texts(latex_grid(REF)) == ["AB", "C", "1", "2", "3", "4", "5", "6"]
    assert cell_texts(latex_grid(r"\begin{tabularx}{5cm}{X{c}} {\bf a} & \textbf{b \&} \\ \end{tabularx}")) == ["a", "b&"]
    garbage = REF.replace("AB", "xy").replace("1 & 2", "7 & 7")
    # AB -> xy, 1 -> 7, 2 -> 7: 5 of 8 cells still match
    assert text_overlap(cell_texts(latex_grid(garbage)), cell_texts(latex_grid(REF))) == 5 / 8
    assert text_overlap([], []) == 1.0 and text_overlap(["a"], []) == 0.0


def test_ink_crop_and_canvas_keep_the_scale():
    page = np.full((10, 8), 255, np.uint8)
    assert ink_crop(page) is None  # a blank page
    page[2, 3], page[5, 6] = 0, 249
    assert ink_crop(page).shape == (4, 4)
    page[5, 6] = 250  # not ink
    assert ink_crop(page).shape == (1, 1)
    a, b = same_canvas(np.zeros((1, 1), np.uint8), np.zeros((3, 5), np.uint8))
    assert a.shape == b.shape == (3, 5) and a.sum() == 255 * 14 and b.sum() == 0  # padded white, not resized


# the fake passes: against the whole page each scored 0.72-0.80 (0.63 for the garbage text) at 150 dpi,
# 0.72-0.80 at 300 dpi, above the 0.6 threshold
FAKES = {
    "iffalse": r"\iffalse " + TABLE + r" \fi" if (TABLE := (
        r"\begin{tabular}{|l|c|c|}\hline Name & Year & Score \\ \hline Alpha & 2019 & 81.5 \\ Beta & 2020 & 77.0 \\"
        r" Gamma & 2021 & 90.2 \\ \hline\end{tabular}")) else "",
    "off_the_page": r"\raisebox{-40cm}{" + TABLE + "}",
    "white": r"\color{white}" + TABLE,
    "garbage_text": TABLE.replace("Name", "qq").replace("Alpha", "zz").replace("Beta", "xx").replace("Gamma", "ww")
    .replace("2019", "aa").replace("2020", "bb").replace("2021", "cc").replace("Year", "g").replace("Score", "h"),
    "one_cm_wide": r"\resizebox{1cm}{!}{" + TABLE + r"}\hspace{12cm}",
    "phantom": r"\phantom{" + TABLE + "}",
}


def test_table_render_refuses_blank_pages_garbage_text_and_tiny_tables():
    _tex()
    fn = get_reward("table_render", dpi=150)
    typo = TABLE.replace("Alpha", "Alfa").replace("81.5", "81.6")  # a near miss: still a pass
    out = fn(prompts=["p"] * 8, completions=[TABLE, typo, *FAKES.values()], answer=[TABLE] * 8)
    assert list(out) == [1.0, 1.0] + [0.0] * 6, dict(zip(["ref", "typo", *FAKES], out))
    # blank: \iffalse, \raisebox off the page, white, \phantom; the garbage text never renders (text gate)
    assert out.metrics["blank_frac"] == [0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0]
    assert out.metrics["text_gated_frac"] == [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    dense = get_reward("table_render", dpi=150, threshold=None, text_gate=0.0)
    s = dense(prompts=["p"] * 2, completions=[FAKES["garbage_text"], FAKES["one_cm_wide"]], answer=[TABLE] * 2)
    assert max(s) < 0.3, list(s)  # rendered at one scale, cut to the ink: far from the reference's table


def test_the_binary_profile_renders_for_a_non_root_user():
    _tex()
    from _non_root import run_as_non_root

    from covey.rewards.latex_render import _SCRIPT, ENDING, PREAMBLE, TEX_BINDS, TEX_ENV

    tex = (PREAMBLE + TABLE + ENDING).encode()
    script = (
        "import os\n"
        "from sbx.binary import run_script\n"
        "from sbx.limits import SandboxLimits\n"
        "lim = SandboxLimits(timeout_s=60, memory_mb=1024, file_mb=64, tmpfs_mb=256, nproc=64, nofile=256, "
        "max_drain_bytes=1 << 26)\n"
        "try:\n"
        f"    r = run_script({_SCRIPT.replace('{dpi}', '72')!r}, {{'main.tex': {tex!r}}}, lim, binds={TEX_BINDS!r}, "
        f"env={TEX_ENV!r})\n"
        "except sbx.SandboxUnavailable as e:\n"
        "    print('refused', e); raise SystemExit\n"
        "print(os.getuid(), r.exit_code, r.channel[:2], len(r.channel) > 612 * 792)\n"
    )
    out, why = run_as_non_root(script, timeout=120)
    if out is None:
        pytest.skip(why)
    if out.stdout.startswith("refused"):
        pytest.skip(f"bubblewrap cannot run for a non-root user here: {out.stdout.strip()}")
    uid = str(65534 if __import__("os").geteuid() == 0 else __import__("os").getuid())
    assert out.stdout.split() == [uid, "0", "b'P5'", "True"], (out.stdout, out.stderr[-2000:])
