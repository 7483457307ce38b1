"""Compacted stores and what is kept beside them: ``handoffscope compact`` writes the spans
as Parquet (:mod:`auditor.stores.compact`), saves the derived tables
(:mod:`auditor.stores.saved`) and keeps rendered reports (:mod:`auditor.stores.kept`) and
each rule's findings (:mod:`auditor.stores.kept_parts`), so a repeated audit answers at once.
``compact --append`` grows a store by segments (:mod:`auditor.stores.appended`), whose
audit (:mod:`auditor.stores.grown`) reuses what was kept for the traces they leave alone.

It sits above the reports (a kept part holds a rule's findings as report JSON) and below
:mod:`auditor.audit`, which reads what is kept.
"""
