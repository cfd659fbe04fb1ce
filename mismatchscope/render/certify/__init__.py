"""Every output of ``certify``: the terminal table and the JSON document (:mod:`.terminal`, :mod:`.payload`),
Markdown for a pull request or a step summary (:mod:`.markdown`) and JUnit for a CI's test report (:mod:`.junit`).

One check per pairing, one for routes and one for the policy version, and with ``--full-vocab`` one for the whole
rows (:mod:`.cases`): the same list in every format, so a CI shows the same failures a person reads.
"""
