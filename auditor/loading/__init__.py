"""Reading trace sources into the one ``spans`` table: files, directories and globs,
compression told by magic bytes, JSON lines and documents, torn tails, Parquet stores.

* :mod:`auditor.loading.sources`: finding and opening the files;
* :mod:`auditor.loading.json_text`, :mod:`auditor.loading.problems`: the text of a line and
  what is wrong with it;
* :mod:`auditor.loading.reader_sql`: the statements the reader runs;
* :mod:`auditor.loading.readers`: the reader shared by ``audit``, ``watch``, ``compact`` and
  the dashboard;
* :mod:`auditor.loading.store_format`: what a Parquet store must be to be read in place;
* :mod:`auditor.loading.segments`: a store grown by appended segments, read as one;
* :mod:`auditor.loading.span_ids`: spans whose ids are missing or invalid;
* :mod:`auditor.loading.load`: :func:`~auditor.loading.load.load_traces` and
  :func:`~auditor.loading.load.append_lines`.

Loading ends by attributing the spans (:mod:`auditor.model.attribution`), so it sits above
the model.
"""
