"""Every output format of the commands, from the results the layers below compute.

Cut by command: ``gate`` and ``certify`` each have a package holding every
format they write (:mod:`.gate`: terminal, JSON, Markdown, JUnit, pictures,
HTML page; :mod:`.certify`: terminal, JSON, Markdown, JUnit), ``report``'s
page is :mod:`.report_page`, ``import``'s output :mod:`.importer`,
``diagnose``'s terminal output and JSON :mod:`.diagnose`, ``timeline``'s
terminal output :mod:`.timeline`; terminal tables for the other commands
(:mod:`.report` and :mod:`.masks` for report and compare-masks, :mod:`.readings_table`,
:mod:`.doctor`), and the pictures and the pages' shared scaffolding
(:mod:`.plots`). What several commands share: :mod:`.layout` (tables at any
width), :mod:`.numbers` (the gate's and the pages' cells), :mod:`.tables` (the terminal tables' number
cells, the input's header line, rule parameters), :mod:`.junit` (the JUnit frame). Nothing here computes a number the
commands report: it formats what it is given. matplotlib (the ``plot``
extra) is imported only inside the functions that draw a picture.
"""
