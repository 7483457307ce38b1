"""Compacted stores and what is kept beside them: ``handoffscope compact`` writes the spans
as Parquet (:mod:`auditor.stores.compact`), saves the derived tables
(:mod:`auditor.stores.saved`) and keeps rendered reports (:mod:`auditor.stores.kept`) and
each rule's findings (:mod:`auditor.stores.kept_parts`), so a repeated audit answers at once.

It sits above the reports (a kept part holds a rule's findings as report JSON) and below
:mod:`auditor.audit`, which reads what is kept.
"""
