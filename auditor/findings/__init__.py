"""What the rules found: a :class:`~auditor.findings.finding.Finding` and the findings of
one rule held as rows (:mod:`auditor.findings.rule_findings`). Pure data, shared by the
audit, the reports and the stores.
"""
