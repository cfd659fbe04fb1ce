"""Every output of ``gate``: the terminal table and JSON (:mod:`.terminal`), the Markdown for a pull request or a
step summary (:mod:`.markdown`), JUnit for a CI's test report (:mod:`.junit`), the pictures (:mod:`.pictures`) and
the HTML page (:mod:`.page`). Each states a check the same way (:mod:`.text`), so a CI and a person read one verdict.
"""
