"""Every output format of the commands, from the results the layers below compute.

Terminal tables (:mod:`.tables` for report and compare-masks, and one module
per command: :mod:`.gate_tables`, :mod:`.timeline`,
:mod:`.diagnose`, :mod:`.certify_tables`, :mod:`.readings_table`),
the gate's Markdown and JUnit (:mod:`.gate_markdown`, :mod:`.gate_junit`),
certify's JSON, Markdown and JUnit (:mod:`.certify_reports`), and the
pictures and HTML pages (:mod:`.plots`). Nothing here computes a number the
commands report: it formats what it is given. matplotlib (the ``plot``
extra) is imported only inside the functions that draw a picture.
"""
