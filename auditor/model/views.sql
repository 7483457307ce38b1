-- Table macros and views that rules and figures build on. They are created as TEMP objects
-- on the audit's connection (nothing is written to a database file) and read only `spans`.
-- Each macro takes the same filter: since_ns / until_ns (span start, Unix ns, NULL for no
-- bound) and agents (a list; empty for all) matching a span's agent, sender or receiver.
--
-- hs_spans(...)        the spans inside the filter
-- hs_phases(...)       the handshake's phase spans, with the handoff they belong to
--                      (handoff_key: trace id and handoff.id, or trace, task, sender and
--                      receiver when handoff.id is missing), their attempt number and, for
--                      validate spans, the validation latency in milliseconds (latency_ms;
--                      a validate span that ended at the timeout takes its late answer's
--                      latency, lateness and decision from its `handoff.late_answer` child);
--                      a receiver's `handoff.expire` span (an accept it voided because no
--                      commit came before the deadline) counts as a phase span of its attempt
-- hs_handoffs(...)     one row per handoff, from its `handoff` span and its phase spans
-- hs_framework_handoffs(...)  other frameworks' handoffs (see below)
-- hs_transitions(...)  every `handoff.transition` event with the attempt it belongs to
--                      (span_name says which span recorded it: `handoff.expire` for a sweep)
-- hs_traces(...)       one row per trace: its span, handoff, attempt and workflow counts,
--                      spend, and the receivers of its handoffs in order
-- Each macro hs_<name> also has an unfiltered view hs_<name>_all, which rules, figures
-- without a filter and the dashboard read. auditor/model/derived.py may point the views at tables
-- computed once per trace set instead (same rows, fewer columns).

-- Whether a span is inside the filter every table macro takes (see above).
CREATE OR REPLACE TEMP MACRO hs_in_filter(since_ns, until_ns, agents, start_ns, agent, sender,
                                          receiver) AS
    (since_ns IS NULL OR start_ns >= since_ns)
    AND (until_ns IS NULL OR start_ns < until_ns)
    AND (len(agents) = 0 OR list_contains(agents, agent) OR list_contains(agents, sender)
         OR list_contains(agents, receiver));

-- The handoff a span belongs to: its trace id and handoff.id, or, without handoff.id, its
-- trace, task, sender and receiver.
CREATE OR REPLACE TEMP MACRO hs_handoff_key(trace_id, handoff_id, task_id, sender, receiver) AS
    concat_ws('/', trace_id, coalesce(handoff_id, concat_ws('/', task_id, sender, receiver)));

-- A pair as one number that orders as the pair does, for arg_min's key: a time (Unix ns; a
-- NULL time after every other, as in a pair) and a rank 0-3, or a flag (a boolean) and a
-- time. ClickHouse compares a pair as a generic value: arg_min over the pair took it about
-- three times as long; DuckDB is a little faster too.
CREATE OR REPLACE TEMP MACRO hs_ns_then_rank(ns, rank) AS
    coalesce(ns::HUGEINT, 9223372036854775808::HUGEINT) * 4 + rank;
CREATE OR REPLACE TEMP MACRO hs_flag_then_ns(flag, ns) AS
    flag::HUGEINT * 4294967296 * 4294967296 * 4
    + coalesce(ns::HUGEINT, 9223372036854775808::HUGEINT);

CREATE OR REPLACE TEMP MACRO hs_spans(since_ns, until_ns, agents) AS TABLE
SELECT *
FROM spans
WHERE hs_in_filter(since_ns, until_ns, agents, start_unix_nano, agent, "handoff.sender",
                   "handoff.receiver");

-- Handoffs other frameworks record, as edges (sender -> receiver), from the spans of other
-- instrumentations (hs_fw_spans; the hs_fw_* macros read the conventions' keys, see
-- auditor/model/conventions.py). None of them went through the handshake.
--
-- hs_framework_handoffs_all   one row per handoff: handoff_key (trace id / span id), trace_id,
--                             span_id, sender, receiver, how it was recorded (convention:
--                             the key pair's convention, `transfer-tool`, `delegation` or
--                             `graph-transition`), start and end, and ok (the span recording
--                             it did not end in error)
-- hs_framework_handoffs(...)  the same, inside the filter (start time; agents matching the
--                             sender or the receiver)
-- hs_fw_conversations: each trace of other instrumentations' spans with the conversation it
-- belongs to. One conversation recorded in several traces (a runtime that starts a trace per
-- message) is tied by span links, followed back to the trace they start from, or by a
-- conversation key the traces share (conversation_key: auditor/model/conventions.py,
-- CONVERSATION_KEYS); a trace tied to none is a conversation of its own.
CREATE OR REPLACE TEMP VIEW hs_fw_conversations AS
WITH RECURSIVE linked AS MATERIALIZED (
    SELECT DISTINCT trace_id, link_trace AS up
    FROM hs_fw_spans
    WHERE link_trace IS NOT NULL AND trace_id IS NOT NULL AND link_trace <> trace_id
),
walk(trace_id, up, depth) AS (
    SELECT trace_id, up, 1 FROM linked
    UNION ALL
    SELECT w.trace_id, l.up, w.depth + 1
    FROM walk AS w JOIN linked AS l ON l.trace_id = w.up
    WHERE w.depth < 64
),
roots AS (
    -- The trace each linked one starts from: one its links reach that links to no other.
    SELECT trace_id, min(up) AS root
    FROM walk WHERE up NOT IN (SELECT trace_id FROM linked)
    GROUP BY trace_id
),
keyed AS (
    SELECT trace_id, min(conversation_key) AS conversation_key
    FROM hs_fw_spans WHERE conversation_key IS NOT NULL AND trace_id IS NOT NULL
    GROUP BY trace_id
),
traces AS (SELECT DISTINCT trace_id FROM hs_fw_spans WHERE trace_id IS NOT NULL)
SELECT t.trace_id,
       coalesce(CASE WHEN coalesce(k.conversation_key, kr.conversation_key) IS NOT NULL
                     THEN 'key:' || coalesce(k.conversation_key, kr.conversation_key) END,
                r.root, t.trace_id) AS conversation
FROM traces AS t
LEFT JOIN roots AS r ON r.trace_id = t.trace_id
LEFT JOIN keyed AS k ON k.trace_id = t.trace_id
LEFT JOIN keyed AS kr ON kr.trace_id = r.root;

CREATE OR REPLACE TEMP VIEW hs_framework_handoff_spans AS
WITH fw AS MATERIALIZED (SELECT * FROM hs_fw_spans),
conversations AS MATERIALIZED (SELECT * FROM hs_fw_conversations),
runs AS MATERIALIZED (
    -- The agents' runs a delegation leads to (named by the span or an ancestor).
    SELECT f.trace_id, f.span_id, f.agent, f.node_id, f.start_unix_nano, c.conversation
    FROM fw AS f LEFT JOIN conversations AS c ON c.trace_id = f.trace_id
    WHERE f.agent_run AND f.named
),
known AS (
    -- The agents that ran in each trace, by their loosely compared name.
    SELECT trace_id, hs_fw_loose(agent) AS loose, min(agent) AS agent
    FROM runs GROUP BY trace_id, hs_fw_loose(agent)
),
handoff_spans AS (
    -- A handoff span (GenAI, OpenLLMetry and Logfire keys; OpenInference's
    -- `handoff to {receiver}` spans with the sender in graph.node.parent_id).
    SELECT h.trace_id, h.span_id, coalesce(h.fw_source, h.agent) AS sender, h.fw_target,
           h.fw_convention, h.start_unix_nano, h.end_unix_nano, h.status_code
    FROM fw AS h WHERE h.fw_convention IS NOT NULL
),
next_agents AS (
    -- One that does not name its receiver hands to the next other agent that runs in the
    -- trace.
    SELECT h.trace_id, h.span_id, arg_min(n.agent, (n.start_unix_nano, n.span_id)) AS agent
    FROM handoff_spans AS h
    JOIN fw AS n ON n.trace_id = h.trace_id AND n.agent_run
        AND n.start_unix_nano >= h.start_unix_nano AND n.agent IS DISTINCT FROM h.sender
    WHERE h.fw_target IS NULL
    GROUP BY h.trace_id, h.span_id
),
pairs AS (
    SELECT h.trace_id, h.span_id, h.sender, coalesce(h.fw_target, n.agent) AS receiver,
           h.fw_convention AS convention, h.start_unix_nano, h.end_unix_nano, h.status_code
    FROM handoff_spans AS h
    LEFT JOIN next_agents AS n ON n.trace_id = h.trace_id AND n.span_id = h.span_id
),
seen_agents AS (
    -- The agents seen in each conversation (named by a span's keys, its name or its node),
    -- by their loosely compared name.
    SELECT DISTINCT coalesce(c.conversation, f.trace_id) AS conversation,
           hs_fw_loose(coalesce(f.graph_node, f.agent)) AS loose
    FROM fw AS f LEFT JOIN conversations AS c ON c.trace_id = f.trace_id
    WHERE f.named OR f.graph_node IS NOT NULL
),
targets AS (
    -- A handoff tool's receiver read from its name, when it is an agent seen in the
    -- conversation, or no other agent runs after the call: a generic word
    -- (`transfer_to_agent`, whose receiver is an argument the span may not carry) followed
    -- by another agent's run names no agent, and the call only passes the turn
    -- (turn_passes).
    SELECT f.trace_id, f.span_id, hs_fw_transfer_target(f.tool) AS receiver
    FROM fw AS f
    LEFT JOIN conversations AS c ON c.trace_id = f.trace_id
    LEFT JOIN seen_agents AS a ON a.conversation = coalesce(c.conversation, f.trace_id)
        AND a.loose = hs_fw_loose(hs_fw_transfer_target(f.tool))
    WHERE f.fw_convention IS NULL AND hs_fw_transfer_target(f.tool) IS NOT NULL
      AND (a.loose IS NOT NULL
           OR NOT EXISTS (SELECT 1 FROM runs AS r
                          WHERE r.trace_id = f.trace_id AND r.agent <> f.agent
                            AND r.start_unix_nano >= f.start_unix_nano))
),
transfers AS (
    -- A handoff tool (`transfer_to_{receiver}`) called by the sender.
    SELECT f.trace_id, f.span_id, f.agent AS sender, t.receiver,
           'transfer-tool' AS convention, f.start_unix_nano, f.end_unix_nano, f.status_code
    FROM fw AS f JOIN targets AS t ON t.trace_id = f.trace_id AND t.span_id = f.span_id
),
delegations AS (
    -- An agent run inside another agent's tool call (pydantic-ai delegation, agents as tools).
    SELECT c.trace_id, c.span_id, p.agent AS sender, c.agent AS receiver,
           'delegation' AS convention, c.start_unix_nano, c.end_unix_nano, c.status_code,
           c.span_id AS run_span
    FROM fw AS c JOIN fw AS p ON p.trace_id = c.trace_id AND p.span_id = c.parent_span_id
    WHERE c.agent_run AND p.tool IS NOT NULL AND p.agent IS DISTINCT FROM c.agent
      AND hs_fw_transfer_target(p.tool) IS NULL
),
nodes AS (
    -- LangGraph node runs of one graph in order; control passing to another agent's node
    -- (an edge, or a Command(goto=...)) is a handoff.
    SELECT trace_id, span_id, graph_node AS agent, start_unix_nano, end_unix_nano, status_code,
           lag(graph_node) OVER w AS prev_agent, lag(start_unix_nano) OVER w AS prev_start
    FROM fw WHERE graph_node IS NOT NULL
    WINDOW w AS (PARTITION BY trace_id, parent_span_id ORDER BY start_unix_nano, span_id)
),
transitions AS (
    SELECT n.trace_id, n.span_id, n.prev_agent AS sender, n.agent AS receiver,
           'graph-transition' AS convention, n.start_unix_nano, n.end_unix_nano, n.status_code,
           n.span_id AS run_span
    FROM nodes AS n
    WHERE n.prev_agent IS NOT NULL AND n.prev_agent <> n.agent
      -- A handoff tool already recorded this move.
      AND NOT EXISTS (
          SELECT 1 FROM transfers AS t
          WHERE t.trace_id = n.trace_id AND t.sender = n.prev_agent AND t.receiver = n.agent
            AND t.start_unix_nano BETWEEN n.prev_start AND n.start_unix_nano)
),
named_handoffs AS (
    SELECT *, 0 AS priority FROM pairs
    UNION ALL SELECT *, 0 AS priority FROM transfers
),
nested AS (
    -- An agent's run directly inside a span of another named agent's run that is no tool
    -- call: its run, a chain or step of it (at any depth, as a span's agent is its nearest
    -- named ancestor's).
    SELECT c.trace_id, c.span_id, p.agent AS sender, c.agent AS receiver,
           'nested-run' AS convention, c.start_unix_nano, c.end_unix_nano, c.status_code,
           1 AS priority
    FROM fw AS c JOIN fw AS p ON p.trace_id = c.trace_id AND p.span_id = c.parent_span_id
    WHERE c.agent_run AND c.named AND p.named AND p.tool IS NULL AND p.agent <> c.agent
      -- A parent that had ended is no owner (an instrumentation left it current).
      AND (p.end_unix_nano IS NULL OR p.end_unix_nano >= c.start_unix_nano)
),
graph_parents AS (
    -- A run whose graph.node.parent_id is another run's graph.node.id (Agno's team and
    -- members) or names an agent that ran (OpenInference's CrewAI and OpenAI Agents spans).
    SELECT c.trace_id, c.span_id, coalesce(min(p.agent), min(k.agent)) AS sender,
           c.agent AS receiver, 'graph-parent' AS convention, c.start_unix_nano,
           c.end_unix_nano, c.status_code, 2 AS priority
    FROM fw AS c
    LEFT JOIN runs AS p ON p.trace_id = c.trace_id AND p.node_id = c.node_parent
    LEFT JOIN known AS k ON k.trace_id = c.trace_id AND k.loose = hs_fw_loose(c.node_parent)
    WHERE c.agent_run AND c.named AND c.node_parent IS NOT NULL
    GROUP BY c.trace_id, c.span_id, c.agent, c.start_unix_nano, c.end_unix_nano,
             c.status_code
),
span_links AS (
    -- A run linked to a span of another named agent (a message passed between runtimes).
    SELECT c.trace_id, c.span_id, l.agent AS sender, c.agent AS receiver,
           'span-link' AS convention, c.start_unix_nano, c.end_unix_nano, c.status_code,
           3 AS priority
    FROM fw AS c JOIN fw AS l ON l.trace_id = c.link_trace AND l.span_id = c.link_span
    WHERE c.agent_run AND c.named AND l.named
),
holders AS (
    -- The agent whose turn is open when a handoff tool that no agent's span encloses runs
    -- (a workflow running every agent's steps side by side under one root): the last agent
    -- named by a span that started before it in its trace.
    SELECT t.trace_id, t.span_id, arg_max(n.agent, (n.start_unix_nano, n.span_id)) AS agent
    FROM fw AS t
    JOIN fw AS n ON n.trace_id = t.trace_id AND n.named
        AND n.start_unix_nano < t.start_unix_nano
    WHERE t.tool IS NOT NULL AND NOT t.named AND t.fw_convention IS NULL
      AND (t.handed IS NOT NULL OR hs_fw_handoff_tool(t.tool))
    GROUP BY t.trace_id, t.span_id
),
calls AS (
    -- Tool calls with the agent that made them: the span's, else the turn's holder.
    SELECT t.* REPLACE (coalesce(h.agent, t.agent) AS agent, t.named OR h.agent IS NOT NULL
                                                            AS named)
    FROM fw AS t
    LEFT JOIN holders AS h ON h.trace_id = t.trace_id AND h.span_id = t.span_id
    LEFT JOIN targets AS x ON x.trace_id = t.trace_id AND x.span_id = t.span_id
    -- A handoff tool naming its receiver is recorded as such (transfers).
    WHERE t.tool IS NOT NULL AND t.fw_convention IS NULL AND x.span_id IS NULL
),
agent_tools AS (
    -- A tool call whose tool is an agent that ran (smolagents' managed agents), or whose
    -- arguments name the agent to do its work (CrewAI's coworker, Agno's member_id).
    SELECT t.trace_id, t.span_id, t.agent AS sender,
           coalesce(min(by_tool.agent), min(by_argument.agent), t.handed) AS receiver,
           'agent-tool' AS convention, t.start_unix_nano, t.end_unix_nano, t.status_code,
           4 AS priority
    FROM calls AS t
    LEFT JOIN known AS by_tool
        ON by_tool.trace_id = t.trace_id AND by_tool.loose = hs_fw_loose(t.tool)
    LEFT JOIN known AS by_argument
        ON by_argument.trace_id = t.trace_id AND by_argument.loose = hs_fw_loose(t.handed)
    WHERE t.named
    GROUP BY t.trace_id, t.span_id, t.agent, t.handed, t.start_unix_nano, t.end_unix_nano,
             t.status_code
),
turn_passes AS (
    -- A handoff tool naming no receiver: the turn passes to the next other agent to run.
    SELECT t.trace_id, t.span_id, t.agent AS sender,
           arg_min(r.agent, (r.start_unix_nano, r.span_id)) AS receiver,
           'turn-passing' AS convention, t.start_unix_nano, t.end_unix_nano, t.status_code,
           5 AS priority
    FROM calls AS t
    JOIN runs AS r ON r.trace_id = t.trace_id AND r.start_unix_nano >= t.start_unix_nano
        AND r.agent <> t.agent
    WHERE t.named AND t.handed IS NULL AND hs_fw_handoff_tool(t.tool)
    GROUP BY t.trace_id, t.span_id, t.agent, t.start_unix_nano, t.end_unix_nano,
             t.status_code
),
top_runs AS (
    -- Agents' runs inside no other agent's run, in the order they started in their trace.
    SELECT c.trace_id, c.span_id, c.agent, c.start_unix_nano, c.end_unix_nano, c.status_code,
           lag(c.agent) OVER (PARTITION BY c.trace_id ORDER BY c.start_unix_nano, c.span_id)
               AS prev_agent,
           lag(c.agent, 2) OVER (PARTITION BY c.trace_id ORDER BY c.start_unix_nano, c.span_id)
               AS prev_prev_agent,
           first_value(c.agent) OVER (PARTITION BY c.trace_id
                                      ORDER BY c.start_unix_nano, c.span_id) AS first_agent
    FROM fw AS c
    LEFT JOIN fw AS p ON p.trace_id = c.trace_id AND p.span_id = c.parent_span_id
    WHERE c.agent_run AND c.named AND (p.span_id IS NULL OR NOT p.named)
),
sequences AS (
    -- The turn passing from one agent's run to the next other agent's run of the trace
    -- (a flow's or a pipeline's wiring, with no tool between them). The turn coming back
    -- to the trace's first agent from the agent it just gave the turn to is that agent's
    -- answer returning (an orchestrator picking the next speaker, a supervisor), no new
    -- delegation.
    SELECT trace_id, span_id, prev_agent AS sender, agent AS receiver,
           'run-sequence' AS convention, start_unix_nano, end_unix_nano, status_code,
           6 AS priority
    FROM top_runs WHERE prev_agent IS NOT NULL AND prev_agent <> agent
        AND NOT (agent = first_agent AND prev_prev_agent IS NOT DISTINCT FROM agent)
),
seen AS (
    -- Evidence found from structure alone, with the run of the receiver it leads to.
    SELECT * FROM nested
    UNION ALL SELECT * FROM graph_parents
    UNION ALL SELECT * FROM span_links
    UNION ALL SELECT * FROM agent_tools
    UNION ALL SELECT * FROM turn_passes
    UNION ALL SELECT * FROM sequences
),
leads AS (
    -- The run each handoff or tool call leads to: the receiver's first run from its start
    -- (inside the call, or after it) in its trace, else in another trace of its
    -- conversation (hs_fw_conversations); a run is the delegation itself.
    SELECT e.trace_id, e.span_id,
           arg_min(r.trace_id, (r.trace_id <> e.trace_id, r.start_unix_nano, r.span_id))
               AS run_trace,
           arg_min(r.span_id, (r.trace_id <> e.trace_id, r.start_unix_nano, r.span_id))
               AS run_span
    FROM (SELECT h.trace_id, h.span_id, h.receiver, h.start_unix_nano,
                 coalesce(c.conversation, h.trace_id) AS conversation
          FROM (SELECT trace_id, span_id, receiver, start_unix_nano FROM named_handoffs
                UNION ALL
                SELECT trace_id, span_id, receiver, start_unix_nano FROM seen
                WHERE convention IN ('agent-tool', 'turn-passing')) AS h
          LEFT JOIN conversations AS c ON c.trace_id = h.trace_id) AS e
    JOIN runs AS r ON coalesce(r.conversation, r.trace_id) = e.conversation
        AND r.agent = e.receiver AND r.start_unix_nano >= e.start_unix_nano
    GROUP BY e.trace_id, e.span_id
),
anchored AS (
    SELECT s.*, coalesce(l.run_trace, s.trace_id) AS anchor_trace,
           coalesce(l.run_span, s.span_id) AS anchor
    FROM seen AS s LEFT JOIN leads AS l ON l.trace_id = s.trace_id AND l.span_id = s.span_id
    WHERE s.sender IS NOT NULL AND s.receiver IS NOT NULL AND s.sender <> s.receiver
),
copies AS (
    -- A handoff span inside one that records the same handoff: two instrumentations of one
    -- tool call.
    SELECT c.trace_id, c.span_id
    FROM named_handoffs AS c
    JOIN fw AS f ON f.trace_id = c.trace_id AND f.span_id = c.span_id
    JOIN named_handoffs AS o ON o.trace_id = c.trace_id AND o.span_id = f.parent_span_id
        AND o.sender = c.sender AND o.receiver = c.receiver
),
named AS (
    -- A handoff recorded by several spans that lead to one run is one edge.
    SELECT n.*, coalesce(l.run_trace, n.trace_id) AS anchor_trace,
           coalesce(l.run_span, n.span_id) AS anchor,
           row_number() OVER (PARTITION BY coalesce(l.run_trace, n.trace_id),
                                           coalesce(l.run_span, n.span_id),
                                           n.sender, n.receiver
                              ORDER BY n.start_unix_nano, n.span_id) AS nth
    FROM named_handoffs AS n
    LEFT JOIN leads AS l ON l.trace_id = n.trace_id AND l.span_id = n.span_id
    LEFT JOIN copies AS x ON x.trace_id = n.trace_id AND x.span_id = n.span_id
    WHERE x.span_id IS NULL
),
recorded AS (
    -- What the handoff spans, handoff tools, delegations and graph transitions recorded.
    SELECT anchor_trace AS trace_id, anchor FROM named
    UNION ALL SELECT trace_id, run_span FROM delegations
    UNION ALL SELECT trace_id, run_span FROM transitions
),
structural AS (
    -- One edge per delegation: a run found through several kinds of evidence is one edge
    -- (the first kind in priority order), none when a handoff already records it.
    SELECT * FROM (
        SELECT a.*, row_number() OVER (PARTITION BY a.anchor_trace, a.anchor
                                       ORDER BY a.priority, a.start_unix_nano, a.span_id) AS nth
        FROM anchored AS a
        WHERE NOT EXISTS (SELECT 1 FROM recorded AS r
                          WHERE r.trace_id = a.anchor_trace AND r.anchor = a.anchor)
    ) AS ranked
    WHERE nth = 1
),
edges AS (
    SELECT * EXCLUDE (priority, anchor_trace, anchor, nth) FROM named WHERE nth = 1
    UNION ALL SELECT * EXCLUDE (run_span) FROM delegations
    UNION ALL SELECT * EXCLUDE (run_span) FROM transitions
    UNION ALL SELECT * EXCLUDE (priority, anchor_trace, anchor, nth) FROM structural
),
candidates AS (
    SELECT * FROM edges
    WHERE receiver IS NOT NULL
      -- Control staying with its agent (a refused handoff, as an adapter records it) is no
      -- edge.
      AND sender IS DISTINCT FROM receiver
),
handshakes AS (
    -- The library's handoffs (a handshake adapter, collector.integrations) in the traces
    -- that hold an edge: the handshake's own spans record such a delegation, so evidence of
    -- it is no second edge. Each hides only the delegation it ran under (below).
    SELECT trace_id, "handoff.sender" AS sender, "handoff.receiver" AS receiver,
           start_unix_nano, end_unix_nano
    FROM spans
    WHERE name = 'handoff' AND trace_id IN (SELECT trace_id FROM candidates)
),
under AS (
    -- Evidence of a delegation that ran during a handshake between the same agents: the
    -- handshake inside the framework's handoff span, or the receiver's run inside the commit.
    SELECT DISTINCT e.trace_id, e.span_id
    FROM candidates AS e
    JOIN handshakes AS h ON h.trace_id = e.trace_id AND h.sender = e.sender
        AND h.receiver = e.receiver
        AND h.start_unix_nano <= e.end_unix_nano AND e.start_unix_nano <= h.end_unix_nano
),
acts AS (
    -- Each act of handing off between two agents: a handshake, or the sender's handoff span,
    -- tool call or call of the receiver's run (validated when a handshake ran during it).
    -- Evidence that only shows the turn passing (a parent id, a link, the order of runs or
    -- of graph nodes) follows an act instead.
    SELECT trace_id, sender, receiver, start_unix_nano, true AS validated FROM handshakes
    UNION ALL
    SELECT e.trace_id, e.sender, e.receiver, e.start_unix_nano, u.span_id IS NOT NULL
    FROM candidates AS e
    LEFT JOIN under AS u ON u.trace_id = e.trace_id AND u.span_id = e.span_id
    WHERE e.convention NOT IN ('graph-parent', 'span-link', 'run-sequence', 'graph-transition')
),
follows AS (
    -- A receiver's run found from structure alone (its parent id, a link, its place) after
    -- the act that handed it the turn: the latest act between the same agents before it.
    -- One act leads to one run: only the first run after it is that act's delegation.
    SELECT e.trace_id, e.span_id,
           arg_max(a.validated, a.start_unix_nano) AS validated,
           max(a.start_unix_nano) AS act_start, any_value(e.start_unix_nano) AS run_start
    FROM candidates AS e
    JOIN acts AS a ON a.trace_id = e.trace_id AND a.sender = e.sender
        AND a.receiver = e.receiver AND a.start_unix_nano < e.start_unix_nano
    WHERE e.convention IN ('graph-parent', 'span-link', 'run-sequence', 'graph-transition')
    GROUP BY e.trace_id, e.span_id, e.sender, e.receiver
),
hidden AS (
    SELECT trace_id, span_id FROM under
    UNION ALL
    SELECT trace_id, span_id FROM (
        SELECT f.*, row_number() OVER (PARTITION BY f.trace_id, f.act_start, e.sender,
                                                    e.receiver
                                       ORDER BY f.run_start, f.span_id) AS nth
        FROM follows AS f
        JOIN candidates AS e ON e.trace_id = f.trace_id AND e.span_id = f.span_id
    ) AS first_runs
    WHERE validated AND nth = 1
)
SELECT concat_ws('/', e.trace_id, e.span_id) AS handoff_key, e.trace_id, e.span_id, e.sender,
       e.receiver, e.convention, e.start_unix_nano, e.end_unix_nano,
       coalesce(e.status_code, 'UNSET') <> 'ERROR' AS ok
FROM candidates AS e
LEFT JOIN hidden AS x ON x.trace_id = e.trace_id AND x.span_id = e.span_id
WHERE x.span_id IS NULL;

-- Read through hs_framework_handoffs_all, which auditor/model/derived.py may point at a table.
CREATE OR REPLACE TEMP VIEW hs_framework_handoffs_all AS SELECT * FROM hs_framework_handoff_spans;

CREATE OR REPLACE TEMP MACRO hs_framework_handoffs(since_ns, until_ns, agents) AS TABLE
SELECT *
FROM hs_framework_handoffs_all
WHERE hs_in_filter(since_ns, until_ns, agents, start_unix_nano, NULL, sender, receiver);

-- Every phase span, computed from the spans; hs_phases_all reads it (or a derived table)
-- and hs_phases(...) filters hs_phases_all, so what is built on hs_phases (attempts,
-- outcomes, the transitions' anchors) reads a derived table when there is one.
CREATE OR REPLACE TEMP VIEW hs_phase_spans AS
SELECT
    -- A validate span the sender ended when its clock fired reads as one that recorded the
    -- answer which came later (its child `handoff.late_answer`): late, what it said, and
    -- when, as a validate span held open for the answer would have.
    s.* REPLACE (coalesce(s."handoff.late", late.late) AS "handoff.late",
                 coalesce(s."handoff.late.decision", late.decision) AS "handoff.late.decision"),
    hs_handoff_key(s.trace_id, s."handoff.id", s."handoff.task_id", s."handoff.sender",
                   s."handoff.receiver") AS handoff_key,
    coalesce(s."handoff.attempt", 1) AS attempt_no,
    CASE WHEN s.name = 'handoff.validate' THEN
        coalesce(s."handoff.validation_latency_ms",
                 CASE WHEN s."handoff.decision" IN ('accept', 'reject') THEN s.duration_ms END,
                 late.latency_ms)
    END AS latency_ms
FROM spans AS s
LEFT JOIN (
    SELECT trace_id, parent_span_id, max("handoff.validation_latency_ms") AS latency_ms,
           bool_or("handoff.late") AS late, any_value("handoff.late.decision") AS decision
    FROM spans
    WHERE name = 'handoff.late_answer'
    GROUP BY ALL
) AS late ON s.name = 'handoff.validate' AND late.trace_id = s.trace_id
         AND late.parent_span_id = s.span_id
WHERE s.name IN ('handoff.propose', 'handoff.validate', 'handoff.commit', 'handoff.expire');

CREATE OR REPLACE TEMP VIEW hs_phases_all AS SELECT * FROM hs_phase_spans;

-- The same filter as hs_spans: a phase span is a span, so filtering it after deriving its
-- columns gives the rows deriving the filtered spans would.
CREATE OR REPLACE TEMP MACRO hs_phases(since_ns, until_ns, agents) AS TABLE
SELECT *
FROM hs_phases_all
WHERE hs_in_filter(since_ns, until_ns, agents, start_unix_nano, agent, "handoff.sender",
                   "handoff.receiver");

CREATE OR REPLACE TEMP MACRO hs_handoffs(since_ns, until_ns, agents) AS TABLE
WITH keyed AS (
    SELECT
        s.*,
        hs_handoff_key(s.trace_id, s."handoff.id", s."handoff.task_id", s."handoff.sender",
                   s."handoff.receiver") AS handoff_key
    FROM hs_spans(since_ns, until_ns, agents) AS s
    WHERE s.name IN ('handoff', 'handoff.propose', 'handoff.validate', 'handoff.commit',
                     'handoff.expire')
)
SELECT
    handoff_key,
    arg_min(trace_id, hs_flag_then_ns(name <> 'handoff', start_unix_nano)) AS trace_id,
    arg_min(span_id, hs_flag_then_ns(name <> 'handoff', start_unix_nano)) AS span_id,
    any_value("handoff.task_id") AS task_id,
    any_value("handoff.sender") AS sender,
    any_value("handoff.receiver") AS receiver,
    any_value("handoff.idempotency_key") AS idempotency_key,
    max("handoff.max_attempts") AS max_attempts,
    greatest(max("handoff.attempts"), max("handoff.attempt"), 1) AS attempts,
    coalesce(any_value("handoff.mode") FILTER (WHERE name = 'handoff'),
             any_value("handoff.mode"), 'handshake') AS mode,
    -- A sender that closed its handoff while an accept was still open records `validated`;
    -- if the receiver's sweep later voided that (last) attempt, the handoff ended void.
    CASE WHEN any_value("handoff.state") FILTER (WHERE name = 'handoff') = 'validated'
              AND max("handoff.attempt") FILTER (WHERE name = 'handoff.expire')
                  >= greatest(max("handoff.attempts"), max("handoff.attempt"), 1)
         THEN 'void'
         ELSE any_value("handoff.state") FILTER (WHERE name = 'handoff') END AS final_state,
    min(start_unix_nano) AS start_unix_nano,
    max(end_unix_nano) AS end_unix_nano
FROM keyed
GROUP BY handoff_key
UNION ALL
-- Other frameworks' handoffs: one attempt each, never validated (mode `framework`).
SELECT handoff_key, trace_id, span_id, NULL, sender, receiver, NULL, NULL, 1, 'framework', NULL,
       start_unix_nano, end_unix_nano
FROM hs_framework_handoffs(since_ns, until_ns, agents);

CREATE OR REPLACE TEMP MACRO hs_transitions(since_ns, until_ns, agents) AS TABLE
WITH events AS (
    SELECT
        s.trace_id,
        s.span_id,
        s.name AS span_name,
        hs_handoff_key(s.trace_id, s."handoff.id", s."handoff.task_id", s."handoff.sender",
                   s."handoff.receiver") AS handoff_key,
        s."handoff.attempt" AS span_attempt,
        coalesce(s."handoff.mode", 'handshake') AS mode,
        unnest(s.events) AS e
    FROM hs_spans(since_ns, until_ns, agents) AS s
    WHERE s.name IN ('handoff', 'handoff.propose', 'handoff.validate', 'handoff.commit',
                     'handoff.expire')
), moves AS MATERIALIZED (
    -- Materialised narrow: read three times, and each read of `events` would carry every
    -- event's attribute map along.
    SELECT
        trace_id, span_id, span_name, handoff_key, span_attempt, mode,
        e.time_unix_nano AS at_ns,
        e.attributes['handoff.transition.from'] AS from_state,
        e.attributes['handoff.transition.to'] AS to_state,
        e.attributes['handoff.transition.reason'] AS reason,
        TRY_CAST(e.attributes['handoff.attempt'] AS INTEGER) AS event_attempt
    FROM events
    WHERE e.name = 'handoff.transition'
), unplaced AS (
    -- Events that say neither on themselves nor on their span which attempt they belong to
    -- (traces from before events carried `handoff.attempt`); only these need placing.
    SELECT * FROM moves WHERE event_attempt IS NULL AND span_attempt IS NULL
), phases AS (
    SELECT handoff_key, attempt_no, name, start_unix_nano, end_unix_nano
    FROM hs_phases(since_ns, until_ns, agents)
    WHERE handoff_key IN (SELECT handoff_key FROM unplaced)
), anchors AS (
    -- Where each attempt's states begin, for events on the `handoff` span (which carries no
    -- attempt number): `start` and `proposed` at the propose span's start (or, with no
    -- propose, the commit span's), `validated` when the validate span ended.
    SELECT handoff_key, attempt_no, start_unix_nano AS at_ns, 'start' AS from_state
    FROM phases WHERE name IN ('handoff.propose', 'handoff.commit')
    UNION ALL
    SELECT handoff_key, attempt_no, start_unix_nano, 'proposed'
    FROM phases WHERE name = 'handoff.propose'
    UNION ALL
    SELECT handoff_key, attempt_no, end_unix_nano, 'validated'
    FROM phases WHERE name = 'handoff.validate'
)
SELECT
    trace_id, span_id, span_name, handoff_key, mode, at_ns, from_state, to_state, reason,
    coalesce(event_attempt, span_attempt) AS attempt_no
FROM moves
WHERE event_attempt IS NOT NULL OR span_attempt IS NOT NULL
UNION ALL
SELECT
    m.trace_id, m.span_id, m.span_name, m.handoff_key, m.mode, m.at_ns,
    m.from_state, m.to_state, m.reason,
    coalesce(a.attempt_no, 1) AS attempt_no
FROM unplaced AS m
ASOF LEFT JOIN anchors AS a
    ON m.handoff_key = a.handoff_key AND m.from_state = a.from_state AND m.at_ns >= a.at_ns;

CREATE OR REPLACE TEMP VIEW hs_handoffs_all AS SELECT * FROM hs_handoffs(NULL, NULL, []);
CREATE OR REPLACE TEMP VIEW hs_transitions_all AS SELECT * FROM hs_transitions(NULL, NULL, []);

-- hs_usage(...): the spans that report tokens or cost, each counting only what nothing below
-- it reported: the most specific report wins, and a report higher up (an agent run's total,
-- a commit's `work.report_usage()` above the model calls it made) counts only the rest,
-- whatever the depth between them. A span with nothing left to count is left out, so sums
-- never count the same tokens twice. input_tokens is the input total with the cached tokens
-- inside it (cache_read_tokens, cache_write_tokens), and reasoning_tokens are inside
-- output_tokens. Tokens without a cost are priced from hs_prices (auditor/model/prices.py: the
-- model that answered, its provider, the price in force when the request started, the tier
-- of its input total), marked cost_estimated; tokens nothing prices are marked unpriced and
-- keep a NULL cost.
CREATE OR REPLACE TEMP MACRO hs_usage(since_ns, until_ns, agents) AS TABLE
WITH RECURSIVE reports AS (
    SELECT *,
           hs_usage_cache_read(attributes, "gen_ai.request.model", "gen_ai.provider.name")
               AS cache_read_tokens,
           hs_usage_cache_write(attributes, "gen_ai.request.model", "gen_ai.provider.name")
               AS cache_write_tokens,
           hs_usage_reasoning(attributes, "gen_ai.request.model", "gen_ai.provider.name")
               AS reasoning_tokens,
           hs_usage_provider(attributes, "gen_ai.request.model", "gen_ai.provider.name")
               AS price_provider,
           -- Read from the attributes here, not after the join below: the join would carry
           -- every report's attributes map through its hash table.
           hs_usage_price_model(attributes, "gen_ai.request.model", "gen_ai.provider.name")
               AS price_model,
           hs_fw_model(attributes, name, "gen_ai.agent.name", "gen_ai.request.model",
                       "gen_ai.operation.name", "gen_ai.agent.handoff.source.name",
                       "gen_ai.agent.handoff.target.name") AS model
    FROM hs_spans(since_ns, until_ns, agents)
    WHERE input_tokens IS NOT NULL OR output_tokens IS NOT NULL OR cost_usd IS NOT NULL
), links AS MATERIALIZED (
    -- With what each span reported, so that the reports found below need no lookup.
    SELECT trace_id, span_id, parent_span_id, input_tokens, output_tokens, cost_usd,
           input_tokens IS NOT NULL OR output_tokens IS NOT NULL OR cost_usd IS NOT NULL
               AS reports
    FROM spans
    WHERE trace_id IS NOT NULL AND span_id IS NOT NULL
), down(trace_id, span_id, report_above, is_report, depth, input_tokens, output_tokens,
        cost_usd) AS (
    -- From each report down to the nearest reports below it (a walk stops at a report, whose
    -- own walk goes on): the library's phase spans have no children, so over its own traces
    -- this is one join that finds nothing.
    SELECT c.trace_id, c.span_id, c.parent_span_id, c.reports, 1, c.input_tokens,
           c.output_tokens, c.cost_usd
    FROM links AS c SEMI JOIN links AS r
        ON r.trace_id = c.trace_id AND r.span_id = c.parent_span_id AND r.reports
    UNION ALL
    SELECT c.trace_id, c.span_id, d.report_above, c.reports, d.depth + 1, c.input_tokens,
           c.output_tokens, c.cost_usd
    FROM down AS d JOIN links AS c ON c.trace_id = d.trace_id AND c.parent_span_id = d.span_id
    WHERE NOT d.is_report AND d.depth < 256
), cached_below AS (
    -- The cached tokens of the reports found below another (read from their attributes
    -- only for those).
    SELECT d.trace_id, d.report_above, d.span_id,
           hs_usage_cache_read(s.attributes, s."gen_ai.request.model", s."gen_ai.provider.name")
               AS cache_read_tokens,
           hs_usage_cache_write(s.attributes, s."gen_ai.request.model",
                                s."gen_ai.provider.name") AS cache_write_tokens,
           hs_usage_reasoning(s.attributes, s."gen_ai.request.model", s."gen_ai.provider.name")
               AS reasoning_tokens
    FROM down AS d JOIN spans AS s ON s.trace_id = d.trace_id AND s.span_id = d.span_id
    WHERE d.is_report
), below AS (
    -- What the nearest reports under each report reported (each covers its own subtree).
    SELECT d.trace_id, d.report_above AS span_id, sum(d.input_tokens) AS input_below,
           sum(d.output_tokens) AS output_below, sum(d.cost_usd) AS cost_below,
           sum(c.cache_read_tokens) AS cache_read_below,
           sum(c.cache_write_tokens) AS cache_write_below,
           sum(c.reasoning_tokens) AS reasoning_below
    FROM down AS d
    LEFT JOIN cached_below AS c
        ON c.trace_id = d.trace_id AND c.report_above = d.report_above AND c.span_id = d.span_id
    WHERE d.is_report
    GROUP BY ALL
), counted AS (
    SELECT r.* EXCLUDE (price_model, model),
           -- The input total with the cached tokens inside it, as genai-prices counts it.
           CASE WHEN hs_usage_input_excludes_cache(r.scope_name, r.price_provider)
                THEN r.input_tokens + coalesce(r.cache_read_tokens, 0)
                     + coalesce(r.cache_write_tokens, 0)
                ELSE r.input_tokens END AS input_total,
           b.span_id IS NOT NULL AS covers_reports,
           b.input_below, b.output_below, b.cost_below, b.cache_read_below,
           b.cache_write_below, b.reasoning_below, r.price_model, r.model
    FROM reports AS r
    LEFT JOIN below AS b
        ON b.trace_id IS NOT DISTINCT FROM r.trace_id AND b.span_id = r.span_id
), left_over AS (
    SELECT *,
           CASE WHEN NOT covers_reports THEN input_total
                ELSE greatest(input_total - coalesce(input_below, 0), 0) END AS in_left,
           CASE WHEN NOT covers_reports THEN output_tokens
                ELSE greatest(output_tokens - coalesce(output_below, 0), 0) END AS out_left,
           CASE WHEN NOT covers_reports THEN cache_read_tokens
                ELSE greatest(cache_read_tokens - coalesce(cache_read_below, 0), 0) END
               AS cr_left,
           CASE WHEN NOT covers_reports THEN cache_write_tokens
                ELSE greatest(cache_write_tokens - coalesce(cache_write_below, 0), 0) END
               AS cw_left,
           CASE WHEN NOT covers_reports THEN reasoning_tokens
                ELSE greatest(reasoning_tokens - coalesce(reasoning_below, 0), 0) END
               AS rs_left,
           CASE WHEN NOT covers_reports THEN cost_usd
                -- The share of the tokens left over, or (a cost with no tokens) the cost
                -- left over.
                WHEN coalesce(input_total, 0) + coalesce(output_tokens, 0) > 0
                THEN cost_usd
                     * (greatest(coalesce(input_total, 0) - coalesce(input_below, 0), 0)
                        + greatest(coalesce(output_tokens, 0) - coalesce(output_below, 0), 0))
                     / (coalesce(input_total, 0) + coalesce(output_tokens, 0))
                ELSE greatest(cost_usd - coalesce(cost_below, 0), 0) END AS cost_left
    FROM counted
), kept AS (
    SELECT *
    FROM left_over
    WHERE NOT covers_reports OR in_left > 0 OR out_left > 0 OR cost_left > 0
), rates AS (
    -- The price in force for each report without a cost of its own: of its (model,
    -- provider)'s rows, those whose input tier holds its input total, the last dated price
    -- in force when it started (the first one when none is).
    SELECT k.trace_id, k.span_id,
           max(p.cond) AS cond,
           arg_max(p.per_request, p.cond) AS per_request,
           arg_max(p.input_mtok, p.cond) AS input_mtok,
           arg_max(p.cache_read_mtok, p.cond) AS cache_read_mtok,
           arg_max(p.cache_write_mtok, p.cond) AS cache_write_mtok,
           arg_max(p.output_mtok, p.cond) AS output_mtok
    FROM kept AS k
    JOIN hs_prices AS p
        ON p.model = k.price_model AND p.provider IS NOT DISTINCT FROM k.price_provider
       AND coalesce(k.in_left, 0) > p.input_above
       AND (p.input_upto IS NULL OR coalesce(k.in_left, 0) <= p.input_upto)
       AND (p.cond = 0
            OR ((p.starts_ns IS NULL OR k.start_unix_nano >= p.starts_ns)
                AND (p.tod_from_s IS NULL
                     OR CASE WHEN p.tod_from_s <= p.tod_until_s
                             THEN (k.start_unix_nano // 1000000000) % 86400 >= p.tod_from_s
                                  AND (k.start_unix_nano // 1000000000) % 86400 < p.tod_until_s
                             ELSE (k.start_unix_nano // 1000000000) % 86400 >= p.tod_from_s
                                  OR (k.start_unix_nano // 1000000000) % 86400 < p.tod_until_s
                        END)))
    WHERE k.cost_left IS NULL
    GROUP BY k.trace_id, k.span_id
), priced AS (
    SELECT k.*, p.cond IS NOT NULL AS has_price,
           p.per_request
           + (greatest(coalesce(k.in_left, 0) - coalesce(k.cr_left, 0) - coalesce(k.cw_left, 0),
                       0) * p.input_mtok
              + coalesce(k.cr_left, 0) * p.cache_read_mtok
              + coalesce(k.cw_left, 0) * p.cache_write_mtok
              + coalesce(k.out_left, 0) * p.output_mtok) / 1e6 AS price_cost
    FROM kept AS k
    LEFT JOIN rates AS p ON p.trace_id IS NOT DISTINCT FROM k.trace_id AND p.span_id = k.span_id
)
SELECT * EXCLUDE (input_total, input_below, output_below, cost_below, cache_read_below,
                  cache_write_below, reasoning_below, in_left, out_left, cr_left, cw_left,
                  rs_left, cost_left, covers_reports, has_price, price_cost) REPLACE (
           in_left AS input_tokens,
           out_left AS output_tokens,
           cr_left AS cache_read_tokens,
           cw_left AS cache_write_tokens,
           rs_left AS reasoning_tokens,
           coalesce(cost_left, price_cost) AS cost_usd),
       cost_left IS NULL AND has_price AS cost_estimated,
       cost_left IS NULL AND NOT has_price AS unpriced,
       coalesce("handoff.phase", 'other') AS phase_name
FROM priced;

-- hs_attempts(...): one row per handoff attempt, with whether it produced a usable result
-- (a commit executed or replayed whose result status is not a failure), whether it ended
-- void (any of its spans says so), and what its phases cost.
CREATE OR REPLACE TEMP MACRO hs_attempts(since_ns, until_ns, agents) AS TABLE
SELECT
    handoff_key,
    attempt_no,
    any_value(trace_id) AS trace_id,
    any_value("handoff.task_id") AS task_id,
    any_value("handoff.sender") AS sender,
    any_value("handoff.receiver") AS receiver,
    bool_or(name = 'handoff.commit'
            AND "handoff.commit.outcome" IN ('executed', 'replayed')
            AND coalesce("handoff.result.status", '') NOT IN
                ('failed', 'blocked', 'verification_failed', 'held_for_approval', 'safe_stop'))
        AS ok,
    coalesce(bool_or("handoff.state" = 'void'), false) AS void,
    sum(input_tokens) AS input_tokens,
    sum(output_tokens) AS output_tokens,
    sum(cost_usd) AS cost_usd
FROM hs_phases(since_ns, until_ns, agents)
GROUP BY handoff_key, attempt_no
UNION ALL
SELECT handoff_key, 1, trace_id, NULL, sender, receiver, ok, false, NULL, NULL, NULL
FROM hs_framework_handoffs(since_ns, until_ns, agents);

-- hs_outcomes(...): one row per handoff that has attempts: its trace, sender and receiver,
-- how many attempts it took, whether any of them produced a usable result (ok) and whether
-- the first one did (first_ok).
CREATE OR REPLACE TEMP MACRO hs_outcomes(since_ns, until_ns, agents) AS TABLE
SELECT
    handoff_key,
    any_value(trace_id) AS trace_id,
    any_value(sender) AS sender,
    any_value(receiver) AS receiver,
    count(*) AS attempts,
    bool_or(ok) AS ok,
    arg_min(ok, attempt_no) AS first_ok
FROM hs_attempts(since_ns, until_ns, agents)
GROUP BY handoff_key;

-- hs_workflow_runs(...): one row per workflow root span (`invoke_workflow ...`).
CREATE OR REPLACE TEMP MACRO hs_workflow_runs(since_ns, until_ns, agents) AS TABLE
SELECT
    trace_id,
    span_id,
    coalesce("handoff.workflow.id", trace_id) AS workflow_id,
    coalesce("gen_ai.workflow.name", regexp_replace(name, '^invoke_workflow ?', '')) AS workflow_name,
    coalesce("handoff.workflow.attempt", 1) AS run,
    -- Another framework's GenAI workflow span (no handoff.workflow.id, which the library
    -- sets when the run starts) says no outcome: it succeeded unless it ended in error.
    coalesce(
        "handoff.workflow.outcome",
        CASE WHEN "handoff.workflow.id" IS NULL
             THEN CASE WHEN status_code = 'ERROR' THEN 'failure' ELSE 'success' END
        END
    ) AS outcome,
    start_unix_nano
FROM hs_spans(since_ns, until_ns, agents)
WHERE "gen_ai.operation.name" = 'invoke_workflow' OR name LIKE 'invoke_workflow%';

-- hs_traces(...): one row per trace (spans without a trace id make one row of their own):
-- what the summary and the per-workflow figures add up, so a figure over a selection of
-- whole traces sums a row per trace instead of aggregating every span again. Every count is
-- exact when summed over traces: a handoff, an attempt and a usage span each belong to one
-- trace. Lists of names are sorted. `chain` lists the receivers of its handoffs (those
-- with attempts) in order, and `first_failure` is the position of the first that did not
-- succeed (len(chain) + 1 when all did).
CREATE OR REPLACE TEMP MACRO hs_traces(since_ns, until_ns, agents) AS TABLE
WITH per_span AS (
    SELECT
        trace_id,
        count(*) AS spans,
        min(start_time) AS start_time,
        max(end_time) AS end_time,
        -- Plain lists of the values present, deduplicated afterwards: several times
        -- quicker than list(DISTINCT ...) or a list of lists (measured at 1M spans).
        -- Agents, not processes: a span named by nothing but its service.name is left out.
        list_sort(list_distinct(list(agent) FILTER (
            WHERE agent IS NOT NULL
              AND ("gen_ai.agent.name" IS NOT NULL OR agent IS DISTINCT FROM service_name))))
            AS span_agents,
        list_sort(list_distinct(list(service_name) FILTER (WHERE service_name IS NOT NULL)))
            AS services
    FROM hs_spans(since_ns, until_ns, agents)
    GROUP BY trace_id
),
per_phase AS (
    SELECT trace_id, count(DISTINCT handoff_key) AS handoffs
    FROM hs_phases(since_ns, until_ns, agents) GROUP BY trace_id
),
per_attempt AS (
    SELECT trace_id, count(*) AS attempts
    FROM hs_attempts(since_ns, until_ns, agents) GROUP BY trace_id
),
per_framework AS (
    -- The agents a delegation names count as agents seen, whether or not a span of theirs
    -- is in the trace (a coworker named only by the manager's tool call).
    SELECT trace_id, count(*) AS handoffs,
           list_sort(list_distinct(list_concat(list(sender) FILTER (WHERE sender IS NOT NULL),
                                               list(receiver)))) AS handoff_agents
    FROM hs_framework_handoffs(since_ns, until_ns, agents) GROUP BY trace_id
),
per_run AS (
    SELECT trace_id, list_sort(list_distinct(list(workflow_id))) AS workflow_ids,
           any_value(workflow_id) AS workflow_id, any_value(workflow_name) AS workflow_name
    FROM hs_workflow_runs(since_ns, until_ns, agents) GROUP BY trace_id
),
per_usage AS (
    SELECT trace_id, count(*) AS usage_spans, sum(input_tokens) AS input_tokens,
           sum(output_tokens) AS output_tokens, sum(cost_usd) AS cost_usd,
           sum(cost_usd) FILTER (WHERE cost_estimated) AS estimated_cost_usd,
           sum(input_tokens) FILTER (WHERE unpriced) AS unpriced_input_tokens,
           sum(output_tokens) FILTER (WHERE unpriced) AS unpriced_output_tokens
    FROM hs_usage(since_ns, until_ns, agents) GROUP BY trace_id
),
per_handoff AS (
    SELECT
        h.trace_id,
        -- Sorted afterwards (by start, then key): quicker than an ordered aggregate.
        list_sort(list({'start': h.start_unix_nano, 'key': h.handoff_key,
                        'receiver': h.receiver, 'ok': o.ok})) AS ordered,
        min(h.start_unix_nano) AS handoff_start,
        bool_and(o.ok) AS handoffs_ok
    FROM hs_handoffs(since_ns, until_ns, agents) AS h
    JOIN hs_outcomes(since_ns, until_ns, agents) AS o USING (handoff_key)
    GROUP BY h.trace_id
)
SELECT
    s.*,
    coalesce(p.handoffs, 0) + coalesce(f.handoffs, 0) AS handoffs, f.handoff_agents,
    coalesce(a.attempts, 0) AS attempts,
    r.workflow_ids, r.workflow_id, r.workflow_name,
    coalesce(u.usage_spans, 0) AS usage_spans, u.input_tokens, u.output_tokens, u.cost_usd,
    u.estimated_cost_usd, u.unpriced_input_tokens, u.unpriced_output_tokens,
    list_transform(h.ordered, lambda x: x.receiver) AS chain,
    coalesce(list_position(list_transform(h.ordered, lambda x: x.ok), false),
             len(h.ordered) + 1) AS first_failure,
    h.handoff_start, h.handoffs_ok
-- IS NOT DISTINCT FROM: the spans without a trace id are a row too, joined to their own.
FROM per_span AS s
LEFT JOIN per_phase AS p ON p.trace_id IS NOT DISTINCT FROM s.trace_id
LEFT JOIN per_attempt AS a ON a.trace_id IS NOT DISTINCT FROM s.trace_id
LEFT JOIN per_framework AS f ON f.trace_id IS NOT DISTINCT FROM s.trace_id
LEFT JOIN per_run AS r ON r.trace_id IS NOT DISTINCT FROM s.trace_id
LEFT JOIN per_usage AS u ON u.trace_id IS NOT DISTINCT FROM s.trace_id
LEFT JOIN per_handoff AS h ON h.trace_id IS NOT DISTINCT FROM s.trace_id;

CREATE OR REPLACE TEMP VIEW hs_spans_all AS SELECT * FROM hs_spans(NULL, NULL, []);
CREATE OR REPLACE TEMP VIEW hs_usage_all AS SELECT * FROM hs_usage(NULL, NULL, []);
CREATE OR REPLACE TEMP VIEW hs_attempts_all AS SELECT * FROM hs_attempts(NULL, NULL, []);
CREATE OR REPLACE TEMP VIEW hs_outcomes_all AS SELECT * FROM hs_outcomes(NULL, NULL, []);
CREATE OR REPLACE TEMP VIEW hs_workflow_runs_all AS SELECT * FROM hs_workflow_runs(NULL, NULL, []);
-- hs_traces_all reads the other unfiltered views instead of deriving them again from the
-- spans: auditor/model/macros.py writes it from hs_traces' text.
