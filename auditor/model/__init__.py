"""The shared model over the ``spans`` table: the conventions other instrumentations name
agents, models, tokens and costs with; prices; who did each span's work (attribution); the
``hs_*`` views every rule and figure reads (``views.sql``, the macros over it), the tables
derived from them once per trace set, and the structure of delegation.

* :mod:`auditor.model.conventions`, :mod:`auditor.model.usage_keys`: foreign conventions as
  data (adding a convention is a row there);
* :mod:`auditor.model.prices`, :mod:`auditor.model.price_source`: token prices;
* :mod:`auditor.model.attribution`: the agent of every span, resolved once after loading;
* ``views.sql``, :mod:`auditor.model.macros`, :mod:`auditor.model.prepare`: the shared views
  and creating them on a connection;
* :mod:`auditor.model.derived`: the views computed once into tables;
* :mod:`auditor.model.structure`: the delegations the audit could not judge.

It imports only :mod:`auditor.database`, :mod:`auditor.rules` (the rule catalogue, whose SQL
says which columns a derived table keeps) and the settings below it.
"""
