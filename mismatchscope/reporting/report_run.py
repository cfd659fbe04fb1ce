"""``report``'s library call: the pass (with the pictures' histograms and doctor's sample, when asked), the worst
sequences, doctor's findings and the page's token view, as one :class:`ReportDocument`."""

from __future__ import annotations

from dataclasses import replace

from .report_documents import ReportDocument
from .report_options import ReportOptions, selected_rules


def report_document(opts: ReportOptions) -> ReportDocument:
    from ..analysis.engine import run_plan

    request, hist, rules = _request(opts)
    plan, collector = _plan(opts.path, opts.mapping, request, opts.doctor_line)
    sink = collector.sink() if collector is not None else None  # doctor's sample, picked on the pass's threads
    result = run_plan(plan, on_terms=hist.add if hist else None, sink=sink)
    doctor = _doctor(result, collector, opts.path) if collector is not None else None
    worst_rows, traces = None, {}
    if opts.worst:
        from ..analysis.worst import worst_report

        worst_rows, traces = worst_report(result, opts.worst, opts.worst_by, with_traces=opts.worst_traces)
    assert result.report is not None  # report=True
    return ReportDocument(
        replace(result.report, worst=worst_rows),
        analysis=result,
        path=opts.path,
        doctor=doctor,
        plot_data=hist,
        rules=rules,
        traces=traces,
        tokens=_token_view(opts, result, rules),
    )


def _request(opts: ReportOptions):
    """The analysis report asks for; with pictures, the drawn rules, their sweeps and the histograms too."""
    from ..analysis.engine import AnalysisRequest

    if not opts.pictures:
        return AnalysisRequest(report=True, masks=False), None, []
    from ..analysis.histograms import PlotAccumulator
    from ..outputs import require_matplotlib
    from ..rules.drawn import default_sweeps, plot_rules

    require_matplotlib()
    rules = plot_rules(selected_rules(opts.rules, ())[0] if opts.rules else None)
    sweeps = selected_rules([r.label for r in rules], opts.sweeps)[1] if opts.sweeps else default_sweeps(rules)
    return AnalysisRequest(report=True, masks=True, rules=rules, sweeps=sweeps), PlotAccumulator(), rules


def _plan(path: str, mapping: dict[str, str], request, doctor_line: bool):
    """report's pass, and with doctor's line its sample, gathered in the same pass (a small one: the line costs
    a fraction of a second)."""
    if not doctor_line:
        from ..analysis.engine import make_plan

        return make_plan(path, request, mapping), None
    from ..doctor.run import sampled_pass
    from ..doctor.sample import REPORT_SAMPLE_ROWS

    return sampled_pass(path, request, mapping, REPORT_SAMPLE_ROWS)


def _doctor(result, collector, path: str):
    """What ``doctor`` finds in the sample (the run's provenance read as doctor reads it)."""
    from ..doctor.run import examine_result, run_provenance

    return examine_result(result, collector.finish(), provenance=run_provenance(path))


def _token_view(opts: ReportOptions, result, rules):
    """The run's worst sequences token by token, for the page's tokens tab (the view's defaults)."""
    if not opts.page:
        return None
    from ..view import ViewOptions, token_view

    return token_view(opts.path, result, rules, ViewOptions(), opts.tokenizer)
