"""Reports: a self-contained HTML page and every figure as PNG and SVG, from the runs in a store."""
from sepbench.report.page import ReportOutcome, write_report

__all__ = ["ReportOutcome", "write_report"]
