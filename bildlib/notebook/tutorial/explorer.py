"""The tutorial's explorer: sliders for α_FB and α_RB (and the sentence) that redraw part 1's
picture of a BiLD decode, with that decode's calls and the speedup the measured per-call costs
predict (exercise 4's cost model, the notebook's own version).

In JupyterLab the sliders redraw on release. Run headless (papermill, nbconvert) there is no one to
move them: the cell draws the starting setting once, and the notebook goes on.

The picture and its summary are two display handles that a move updates (IPython's display_id), not
an ipywidgets Output widget: under papermill the cell that drew into an Output widget (through
`interactive_output`) sometimes never returned, its kernel idle, with ipykernel 7 (Output widgets
capture by the parent message of the thread that writes, and nbclient waits on what the widget
swallowed). A display handle is a plain output that any front end shows and updates."""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt

from bildlib import decoding as D
from bildlib.decoding.common import check_threshold
from bildlib.notebook.tutorial import lab as LAB
from bildlib.notebook.tutorial import picture


@dataclass
class View:
    """One setting's decode: its picture, its trace and what the cost model predicts."""

    figure: plt.Figure
    trace: D.Trace
    n_large: int  # vanilla large's output length on the sentence
    predicted: float  # speedup over vanilla large, from the per-call costs

    def summary(self) -> str:
        t = self.trace
        return (f"{t.large_calls} large calls and {t.small_calls} small steps for {len(t.source)} tokens "
                f"({t.fallbacks} fallbacks, {t.rollbacks} rollbacks); vanilla large: {self.n_large} "
                f"one-token calls; predicted speedup {self.predicted:.2f}x")  # fmt: skip


def vanilla_length(lab: LAB.Lab, i: int) -> int:
    """Vanilla large's output length on sentence i: its number of one-token calls."""
    return len(D.vanilla(lab.large, lab.sources[i], max_new_tokens=lab.max_new_tokens)[0])


def view(lab: LAB.Lab, i: int, fb: float, rb: float, step: float, large_call,
         n_large: int | None = None) -> View:  # fmt: skip
    """Sentence i of lab decoded by BiLD at (fb, rb), drawn as part 1 draws it. step: a small step
    in s; large_call(k): a large call over k tokens in s (lab.call_costs)."""
    if not 0 <= i < len(lab.sources):
        raise ValueError(f"sentence must be in [0, {len(lab.sources)}), got {i}")
    check_threshold("fallback", fb, 0, 1)
    check_threshold("rollback", rb, 0)
    n_large = vanilla_length(lab, i) if n_large is None else n_large
    ids, tr, story = LAB.recorded(lab, lab.sources[i], fb, rb)
    fig = picture.trace_figure(story, lab.piece, f"sentence {i}: BiLD with α_FB = {fb:g}, α_RB = {rb:g}")
    return View(fig, tr, n_large, LAB.stand_in_predict(tr, n_large, step, large_call))


def explorer(lab: LAB.Lab, i: int, fb: float, rb: float, step: float, large_call):
    """The widget: sliders for the sentence, α_FB and α_RB over the picture and its summary."""
    import ipywidgets as W
    from IPython.display import Pretty, display

    lengths: dict[int, int] = {}  # vanilla large's output length, once per sentence

    def draw(sentence: int, alpha_fb: float, alpha_rb: float) -> tuple[str, plt.Figure]:
        if sentence not in lengths:
            lengths[sentence] = vanilla_length(lab, sentence)
        v = view(lab, sentence, alpha_fb, alpha_rb, step, large_call, lengths[sentence])
        plt.close(v.figure)  # shown through its handle, not again by the inline backend
        return v.summary(), v.figure

    on_release = {"continuous_update": False}  # one redraw per move, not one per pixel
    sliders = {
        "sentence": W.IntSlider(i, 0, len(lab.sources) - 1, description="sentence", **on_release),
        "alpha_fb": W.FloatSlider(fb, min=0.05, max=0.95, step=0.05, description="α_FB", **on_release),
        "alpha_rb": W.FloatSlider(rb, min=0.25, max=6.0, step=0.25, description="α_RB", **on_release),
    }
    box = W.HBox(list(sliders.values()))
    text, fig = draw(i, fb, rb)
    display(box)
    summary, picture = display(Pretty(text), display_id=True), display(fig, display_id=True)

    def redraw(_change=None) -> None:
        text, fig = draw(**{name: s.value for name, s in sliders.items()})
        summary.update(Pretty(text))
        picture.update(fig)

    for s in sliders.values():
        s.observe(redraw, names="value")
    return box
