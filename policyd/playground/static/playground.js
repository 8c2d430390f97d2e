// policyd playground: two editors (a textarea over a backdrop that underlines diagnostics, with a
// line-number gutter), lint as you type, Run, the placements and the selected pod's heatmap, and the
// state shared as a link (#s= deflate-raw compressed JSON in base64url). Written by hand; no build step.
"use strict";

const LINT_DELAY_MS = 300;
const $ = (id) => document.getElementById(id);

// ---- an editor: textarea + backdrop marks + gutter ----

class Editor {
  constructor(root) {
    this.root = root;
    this.text = root.querySelector("textarea");
    this.backdrop = root.querySelector(".backdrop");
    this.gutter = root.querySelector(".gutter");
    this.diagnostics = [];
    this.text.addEventListener("scroll", () => this.syncScroll());
    this.text.addEventListener("input", () => this.render());
    this.text.addEventListener("keydown", (event) => {
      if (event.key === "Tab" && !event.shiftKey) {  // a tab key indents instead of leaving the editor
        event.preventDefault();
        document.execCommand("insertText", false, "  ");
      }
    });
  }

  get value() { return this.text.value; }

  set value(text) {
    this.text.value = text;
    this.diagnostics = [];
    this.render();
  }

  setDiagnostics(diagnostics) {
    this.diagnostics = diagnostics;
    this.render();
  }

  // character offset of 1-based (line, column) in the text, clamped to the line
  offset(lines, line, column) {
    let at = 0;
    const row = Math.min(Math.max(line, 1), lines.length) - 1;
    for (let i = 0; i < row; i++) at += lines[i].length + 1;
    return at + Math.min(Math.max(column, 1) - 1, lines[row].length);
  }

  ranges(lines) {
    const out = [];
    for (const d of this.diagnostics) {
      const start = this.offset(lines, d.line, d.column);
      let end;
      if (d.endLine && d.endColumn && (d.endLine > d.line || d.endColumn > d.column)) {
        end = this.offset(lines, d.endLine, d.endColumn);
      } else {  // no end: the word at the position, or one character
        const rest = this.text.value.slice(start).match(/^[\w.\-/]+/);
        end = start + (rest ? rest[0].length : 1);
      }
      out.push({ start, end: Math.max(end, start + 1), severity: d.severity });
    }
    out.sort((a, b) => a.start - b.start);
    const merged = [];
    for (const r of out) {
      const last = merged[merged.length - 1];
      if (last && r.start <= last.end) {
        last.end = Math.max(last.end, r.end);
        if (r.severity === "error") last.severity = "error";
      } else merged.push({ ...r });
    }
    return merged;
  }

  render() {
    const text = this.text.value;
    const lines = text.split("\n");
    // backdrop: the same text, transparent, with <mark> around each diagnostic's span
    const frag = document.createDocumentFragment();
    let at = 0;
    for (const r of this.ranges(lines)) {
      if (r.start > at) frag.append(text.slice(at, r.start));
      const mark = document.createElement("mark");
      mark.className = r.severity;
      mark.textContent = text.slice(r.start, Math.min(r.end, text.length)) || " ";
      frag.append(mark);
      at = Math.max(at, r.end);
    }
    frag.append(text.slice(at) + "\n");
    this.backdrop.replaceChildren(frag);
    // gutter: one number per line; a line with a diagnostic is marked and titled with its messages
    const byLine = new Map();
    for (const d of this.diagnostics) {
      const line = Math.min(Math.max(d.line, 1), lines.length);
      const seen = byLine.get(line) || [];
      seen.push(d);
      byLine.set(line, seen);
    }
    const numbers = document.createDocumentFragment();
    lines.forEach((_, i) => {
      const div = document.createElement("div");
      div.className = "line";
      div.dataset.line = String(i + 1);
      div.textContent = String(i + 1);
      const here = byLine.get(i + 1);
      if (here) {
        div.classList.add(here.some((d) => d.severity === "error") ? "error" : "warning");
        div.title = here.map((d) => `${d.column}: ${d.message}`).join("\n");
      }
      numbers.append(div);
    });
    this.gutter.replaceChildren(numbers);
    this.syncScroll();
  }

  syncScroll() {
    this.backdrop.scrollTop = this.text.scrollTop;
    this.backdrop.scrollLeft = this.text.scrollLeft;
    this.gutter.scrollTop = this.text.scrollTop;
  }

  reveal(line, column) {
    const lines = this.text.value.split("\n");
    const at = this.offset(lines, line, column);
    this.text.focus();
    this.text.setSelectionRange(at, at);
    const lineHeight = parseFloat(getComputedStyle(this.text).lineHeight) || 18;
    this.text.scrollTop = Math.max(0, (line - 3) * lineHeight);
    this.syncScroll();
  }
}

const policyEditor = new Editor($("policy-editor"));
const clusterEditor = new Editor($("cluster-editor"));
let examples = { policies: [], clusters: [] };
let selectedPod = null;
let lintTimer = null;
let lintSequence = 0;

function setStatus(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

function policyRequest() {
  return {
    policy: { name: $("policy-name").value.trim(), text: policyEditor.value },
    withDefault: $("with-default").checked,
  };
}

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  let doc;
  try {
    doc = await response.json();
  } catch (err) {
    doc = { error: `${response.status} ${response.statusText}`, diagnostics: [] };
  }
  return { ok: response.ok, status: response.status, doc };
}

// ---- diagnostics: marks in the editors and the lists below them ----

function showDiagnostics(listId, editor, fileName, diagnostics, okText) {
  const list = $(listId);
  list.replaceChildren();
  // a diagnostic without a line (null) is about the whole text: listed, not marked
  const placed = (d) => d.line !== null && d.line !== undefined;
  const mine = diagnostics.filter((d) => d.file === fileName && placed(d));
  editor.setDiagnostics(mine);
  for (const d of diagnostics) {
    const li = document.createElement("li");
    li.className = d.severity;
    const where = placed(d) ? `:${d.line}:${d.column}` : "";
    li.textContent = `${d.file}${where}: ${d.severity}: ${d.message}`;
    if (d.file === fileName && placed(d)) li.addEventListener("click", () => editor.reveal(d.line, d.column));
    list.append(li);
  }
  if (!diagnostics.length && okText) {
    const li = document.createElement("li");
    li.className = "ok";
    li.textContent = okText;
    list.append(li);
  }
}

async function lintNow() {
  const sequence = ++lintSequence;
  const request = policyRequest();
  let result;
  try {
    result = await post("/api/lint", request);
  } catch (err) {
    if (sequence === lintSequence) setStatus(`lint: ${err}`, true);
    return;
  }
  if (sequence !== lintSequence) return;  // an older answer, overtaken by newer text
  const diagnostics = result.ok ? result.doc.diagnostics : result.doc.diagnostics || [];
  if (!result.ok && !diagnostics.length) {
    setStatus(`lint: ${result.doc.error}`, true);
  }
  const errors = diagnostics.filter((d) => d.severity === "error").length;
  const ok = result.ok ? `no problems (profiles: ${result.doc.profiles.join(", ") || "none"})` : "";
  showDiagnostics("policy-diagnostics", policyEditor, request.policy.name, diagnostics, ok);
  document.body.dataset.lint = errors ? "errors" : "clean";
  document.body.dataset.lintSequence = String(sequence);
}

function scheduleLint() {
  clearTimeout(lintTimer);
  document.body.dataset.lint = "pending";
  lintTimer = setTimeout(lintNow, LINT_DELAY_MS);
}

// ---- run: placements and heatmap ----

function cellText(cell) {
  if (cell.verdict === "fail") return "FAIL";
  if (cell.verdict === "score") return cell.error ? `${cell.weighted} ERROR` : String(cell.weighted);
  return cell.verdict;
}

function renderHeatmap(explained) {
  const table = $("heatmap");
  table.replaceChildren();
  const failed = $("failed-scheduling");
  failed.hidden = true;
  if (!explained) {
    $("heatmap-title").textContent = "(no attempt recorded for this pod)";
    return;
  }
  $("heatmap-title").textContent =
    `${explained.pod}: attempt ${explained.attempt} (profile ${explained.profile}): ${explained.result}` +
    (explained.node ? ` on ${explained.node}` : "");
  if (!explained.node && explained.message) {
    failed.hidden = false;
    failed.textContent = `FailedScheduling: ${explained.message}`;
  }
  const head = table.createTHead().insertRow();
  head.append(Object.assign(document.createElement("th"), { textContent: "rule \\ node" }));
  for (const node of explained.nodes) {
    const th = document.createElement("th");
    th.textContent = node.name;
    th.dataset.node = node.name;
    if (node.name === explained.node) th.classList.add("chosen");
    if (!node.feasible) th.classList.add("infeasible");
    head.append(th);
  }
  const body = table.createTBody();
  for (const row of explained.rows) {
    const tr = body.insertRow();
    tr.dataset.rule = row.rule;
    tr.dataset.kind = row.kind;
    const label = tr.insertCell();
    label.className = "rule";
    label.textContent = `${row.kind} ${row.rule}`;
    const weights = row.cells.filter((c) => c.verdict === "score").map((c) => c.weighted);
    const low = Math.min(...weights);
    const high = Math.max(...weights);
    row.cells.forEach((cell, i) => {
      const td = tr.insertCell();
      td.dataset.node = explained.nodes[i].name;
      td.dataset.verdict = cell.verdict;
      td.className = "cell " + ({ pass: "pass", fail: "fail", "n/a": "na", "-": "unevaluated", score: "score" }[cell.verdict] || "");
      td.textContent = cellText(cell);
      if (cell.verdict === "fail") td.title = (cell.reasons || []).join("; ");
      if (cell.verdict === "score") {
        td.style.setProperty("--heat", high > low ? String((cell.weighted - low) / (high - low)) : "0.5");
        td.title = `raw ${cell.raw}, normalized ${cell.normalized}, weighted ${cell.weighted}`;
        if (cell.error) td.title += `; evaluation failed (scored 0): ${cell.error}`;
      }
    });
  }
  const total = body.insertRow();
  total.dataset.rule = "TOTAL";
  total.insertCell().textContent = "TOTAL";
  for (const node of explained.nodes) {
    const td = total.insertCell();
    td.className = "cell total";
    td.dataset.node = node.name;
    td.textContent = node.total === null ? "" : String(node.total);
  }
}

function renderPlacements(report) {
  const body = $("placements").tBodies[0];
  body.replaceChildren();
  for (const p of report.placements) {
    const tr = body.insertRow();
    tr.dataset.pod = p.pod;
    if (report.explained && p.pod === report.explained.pod) tr.classList.add("selected");
    const shown = p.node || (p.preempted ? "<preempted>" : "<none>");
    [p.pod, shown, String(p.attempts), p.nominatedNode || "", p.message].forEach((text, i) => {
      const td = tr.insertCell();
      td.textContent = text;
      if (i === 1 && !p.node) td.classList.add("pending");
    });
    tr.addEventListener("click", () => {
      selectedPod = p.pod;
      run();
    });
  }
  const s = report.summary;
  $("summary").textContent =
    `scheduled ${s.scheduled}, unschedulable ${s.unschedulable}, preempted ${s.preempted}` +
    (s.gated ? `, gated ${s.gated}` : "");
}

async function run() {
  const request = {
    ...policyRequest(),
    cluster: { name: $("cluster-name").value.trim(), text: clusterEditor.value },
    seed: Number.parseInt($("seed").value, 10) || 0,
    pod: selectedPod,
  };
  document.body.dataset.run = "running";
  setStatus("running…");
  $("run").disabled = true;
  let result;
  try {
    result = await post("/api/run", request);
  } catch (err) {
    result = { ok: false, status: 0, doc: { error: String(err), diagnostics: [] } };
  } finally {
    $("run").disabled = false;
  }
  if (!result.ok) {
    const diagnostics = result.doc.diagnostics || [];
    const clusterName = request.cluster.name;
    showDiagnostics("policy-diagnostics", policyEditor, request.policy.name,
      diagnostics.filter((d) => d.file !== clusterName), "");
    showDiagnostics("cluster-diagnostics", clusterEditor, clusterName,
      diagnostics.filter((d) => d.file === clusterName), "");
    if (result.status === 422 && request.pod && !diagnostics.length) selectedPod = null;
    setStatus(`run failed (${result.status}): ${result.doc.error}`, true);
    document.body.dataset.run = "failed";
    return;
  }
  showDiagnostics("cluster-diagnostics", clusterEditor, request.cluster.name, [], "");
  selectedPod = result.doc.explained ? result.doc.explained.pod : selectedPod;
  renderPlacements(result.doc);
  renderHeatmap(result.doc.explained);
  setStatus(`ran ${result.doc.placements.length} pods`);
  document.body.dataset.run = "done";
}

// ---- state as a link: #s=<base64url(deflate-raw(JSON))> ----

function state() {
  return {
    v: 1,
    policy: { name: $("policy-name").value, text: policyEditor.value },
    withDefault: $("with-default").checked,
    cluster: { name: $("cluster-name").value, text: clusterEditor.value },
    seed: Number.parseInt($("seed").value, 10) || 0,
    pod: selectedPod,
  };
}

async function transform(bytes, stream) {
  const out = new Response(new Blob([bytes]).stream().pipeThrough(stream));
  return new Uint8Array(await out.arrayBuffer());
}

async function encodeState(doc) {
  const bytes = await transform(new TextEncoder().encode(JSON.stringify(doc)), new CompressionStream("deflate-raw"));
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

async function decodeState(text) {
  const base64 = text.replace(/-/g, "+").replace(/_/g, "/");
  const binary = atob(base64 + "=".repeat((4 - (base64.length % 4)) % 4));
  const bytes = Uint8Array.from(binary, (c) => c.charCodeAt(0));
  const json = new TextDecoder().decode(await transform(bytes, new DecompressionStream("deflate-raw")));
  return JSON.parse(json);
}

function restore(doc) {
  if (!doc || doc.v !== 1 || !doc.policy || !doc.cluster) throw new Error("not a playground link");
  $("policy-name").value = doc.policy.name;
  policyEditor.value = doc.policy.text;
  $("with-default").checked = Boolean(doc.withDefault);
  $("cluster-name").value = doc.cluster.name;
  clusterEditor.value = doc.cluster.text;
  $("seed").value = String(doc.seed || 0);
  selectedPod = doc.pod || null;
}

async function share() {
  const encoded = await encodeState(state());
  history.replaceState(null, "", `#s=${encoded}`);
  const link = $("share-link");
  link.value = location.href;
  link.hidden = false;
  link.select();
  try {
    await navigator.clipboard.writeText(location.href);
    setStatus("link copied");
  } catch (err) {
    setStatus("link below (copy it)");
  }
}

// ---- examples and start-up ----

function loadPolicyExample(name) {
  const example = examples.policies.find((p) => p.name === name);
  if (!example) return;
  $("policy-name").value = example.name;
  $("with-default").checked = example.withDefault;
  policyEditor.value = example.text;
  scheduleLint();
}

function loadClusterExample(name) {
  const example = examples.clusters.find((c) => c.name === name);
  if (!example) return;
  $("cluster-name").value = example.name;
  clusterEditor.value = example.text;
  selectedPod = null;
}

function fillSelect(select, items) {
  select.replaceChildren(new Option("(choose)", ""), ...items.map((i) => new Option(i.name, i.name)));
}

async function start() {
  const response = await fetch("/api/examples");
  examples = await response.json();
  fillSelect($("policy-example"), examples.policies);
  fillSelect($("cluster-example"), examples.clusters);
  $("policy-example").addEventListener("change", (e) => loadPolicyExample(e.target.value));
  $("cluster-example").addEventListener("change", (e) => loadClusterExample(e.target.value));
  $("cluster-upload").addEventListener("change", async (e) => {
    const file = e.target.files[0];
    if (!file) return;
    $("cluster-name").value = /\.(ya?ml|json)$/.test(file.name) ? file.name : "cluster.yaml";
    clusterEditor.value = await file.text();
    selectedPod = null;
  });
  policyEditor.text.addEventListener("input", scheduleLint);
  $("policy-name").addEventListener("change", scheduleLint);
  $("with-default").addEventListener("change", scheduleLint);
  clusterEditor.text.addEventListener("input", () => { selectedPod = null; });
  $("run").addEventListener("click", () => run());
  $("share").addEventListener("click", () => share());

  let restored = false;
  if (location.hash.startsWith("#s=")) {
    try {
      restore(await decodeState(location.hash.slice(3)));
      restored = true;
    } catch (err) {
      setStatus(`the link's state cannot be read: ${err.message}`, true);
    }
  }
  if (!restored) {
    loadPolicyExample(examples.policies[0].name);
    loadClusterExample(examples.clusters[0].name);
  }
  await lintNow();
  if (restored) await run();
  document.body.dataset.ready = "true";
}

start().catch((err) => setStatus(`cannot start: ${err}`, true));
