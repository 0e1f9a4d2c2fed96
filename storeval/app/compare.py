"""Compare two stored runs figure by figure (Welch's t over repetitions, Holm-adjusted, a smallest effect)."""

from __future__ import annotations

from dataclasses import dataclass

from .. import __version__
from ..errors import InputError
from . import Say
from .results import STDOUT, check_output, run_of, write_stdout


@dataclass
class CompareRequest:
    a: str
    b: str
    results: str = "storeval-results"
    html_out: str | None = None
    json_out: str | None = None
    exclude_outliers: bool = False
    confidence: str = "95%"
    min_effect: str = "5%"


@dataclass
class Comparison:
    id_a: str
    id_b: str
    changes: list
    only_a: list[str]
    only_b: list[str]
    differ: list[str]  # configurations not compared: their parameters differ
    rule: str
    environment: list[str]  # what differed between the runs' environments
    same_study: bool
    html_out: str | None = None


def percent(option: str, text: str, *, low: float, high: float, example: str) -> float:
    """A percentage given as ``95%``, ``95`` or ``0.95`` (a fraction below 1), checked against its range."""
    problem = InputError(f"{option} {text!r} is not a percentage from {low:g} to {high:g} % (e.g. {option} {example})")
    try:
        value = float(text.strip().removesuffix("%").strip())
    except ValueError:
        raise problem from None
    if not text.strip().endswith("%") and 0 < value < 1 and low >= 1:  # 0.95: a fraction
        value *= 100
    if not (low <= value <= high):  # NaN fails too
        raise problem
    return value


def compare_runs(request: CompareRequest, say: Say) -> Comparison:
    from ..analysis.figures import analyze
    from ..outputs import write_owned
    from ..report.compare import compare, environment_differences, render_compare_html, rule
    from ..report.document import write_document

    level = percent("--confidence", request.confidence, low=50, high=99.99, example="95%")
    effect = percent("--min-effect", request.min_effect, low=0, high=1000, example="5%")
    if request.json_out:
        check_output(request.json_out)
    if request.html_out:
        check_output(request.html_out, "--html")
    (store_a, id_a), (store_b, id_b) = run_of(request.a, request.results, say), run_of(request.b, request.results, say)
    run_a, run_b = store_a.load_run(id_a), store_b.load_run(id_b)
    changes, only_a, only_b, differ = compare(analyze(run_a, request.exclude_outliers)[1],
                                              analyze(run_b, request.exclude_outliers)[1],
                                              confidence=level / 100, min_effect=effect)
    if not changes:
        why = "; same names, other parameters: " + "; ".join(differ[:3]) if differ else ""
        raise InputError(f"runs {id_a} and {id_b} have no configuration in common{why} (compare runs of the same "
                         "study)")
    environment = environment_differences(run_a, run_b)
    rule_text = rule(level / 100, effect, sum(c.test is not None for c in changes))
    out = Comparison(id_a, id_b, changes, only_a, only_b, differ, rule_text, environment,
                     run_a.study_hash == run_b.study_hash)
    if request.json_out:  # no results store owns a comparison: its ownership header alone proves it is storeval's
        doc = {"storeval_version": __version__, "a": id_a, "b": id_b, "rule": rule_text, "confidence": level / 100,
               "min_effect_percent": effect, "multiple_comparisons": "holm", "environment_differences": environment,
               "changes": [c.as_dict() for c in changes], "only_in_a": only_a, "only_in_b": only_b,
               "parameters_differ": differ}
        if request.json_out == STDOUT:
            write_stdout(doc)
        else:
            write_document(request.json_out, doc, "compare", [id_a, id_b])
    if request.html_out:
        write_owned(request.html_out, "--html", "html", "compare", [id_a, id_b],
                    render_compare_html(run_a, run_b, changes, only_a, only_b, differ, rule_text, environment))
        out.html_out = request.html_out
    return out


__all__ = ["CompareRequest", "Comparison", "compare_runs", "percent"]
