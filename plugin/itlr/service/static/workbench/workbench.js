// The itlr workbench: dense retrieval and itlr side by side, over the service's JSON API.
//
// Everything it shows comes from the API any client calls (docs/service.md): POST /search with
// "dense": true, POST /parse for the terms' polarity, POST /translate for the request. Document
// text is only ever set as text (textContent, text nodes), never parsed as HTML. Fields of an
// answer are read defensively: a missing or unexpected one shows as nothing, not as an error.
"use strict";

const TOKEN_KEY = "itlr-token";
// Words too common to mark in a hit's text when a term contains them.
const STOPWORDS = new Set(
  ("a an and are as at be but by for from has have in is it its of on or other than that the " +
    "their this to was were with without not").split(" "),
);
const WORD = /[\p{L}\p{N}]+/gu;
const MAX_FIELDS = 6; // stored fields shown per hit

const $ = (id) => document.getElementById(id);

// -- the API, with the client token when the service has one ---------------------------------

class ApiError extends Error {
  constructor(status, payload) {
    const said = payload && typeof payload.error === "string" ? payload.error : "";
    super(said || `the service answered ${status}`);
    this.status = status;
    this.payload = payload || {};
  }
}

async function api(path, body) {
  for (;;) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    const headers = { Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    if (token) headers["X-Itlr-Token"] = token;
    const response = await fetch(path, {
      method: body === undefined ? "GET" : "POST",
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "omit",
    });
    let payload = null;
    try {
      payload = await response.json();
    } catch (_) {
      payload = null;
    }
    if (response.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      await askToken(Boolean(token));
      continue;
    }
    if (!response.ok) throw new ApiError(response.status, payload);
    return payload;
  }
}

let tokenWaiters = [];

function askToken(refused) {
  $("token-message").textContent = refused
    ? "That token was refused: enter this service's client token."
    : "This service needs its client token (itlr serve --token, or $ITLR_TOKEN).";
  const dialog = $("token-dialog");
  if (!dialog.open) dialog.showModal();
  $("token-input").value = "";
  $("token-input").focus();
  return new Promise((resolve, reject) => tokenWaiters.push({ resolve, reject }));
}

// Escape closes the dialog: what waited for the token fails, and the next call asks again.
function tokenRefused() {
  const waiting = tokenWaiters;
  tokenWaiters = [];
  const missing = { error: "this service needs its client token: search again to give it" };
  for (const { reject } of waiting) reject(new ApiError(401, missing));
}

function tokenGiven(event) {
  event.preventDefault();
  const token = $("token-input").value.trim();
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token-dialog").close();
  const waiting = tokenWaiters;
  tokenWaiters = [];
  for (const { resolve } of waiting) resolve();
  // The prompt was dismissed at the start (Escape): show the index now that a token is given.
  if (!indexShown && !indexLoading) showIndex();
}

// -- the form --------------------------------------------------------------------------------

function searchBody() {
  const body = {
    query: $("query").value,
    k: Number.parseInt($("k").value, 10) || 10,
    mode: $("mode").value,
  };
  const hard = $("hard-filter").value.trim();
  if (hard !== "") {
    body.hard_filter = Number(hard);
    body.hard_filter_rule = $("hard-filter-rule").value;
  }
  const filter = $("filter").value.trim();
  if (filter !== "") {
    try {
      body.filter = JSON.parse(filter);
    } catch (bad) {
      throw new ApiError(0, { error: `the filter is not JSON: ${bad.message}` });
    }
  }
  return body;
}

async function search(event) {
  if (event) event.preventDefault();
  if (!$("query").value.trim()) return;
  clearError();
  setStatus("searching…");
  const started = performance.now();
  try {
    const body = searchBody();
    const rewrite = $("input-kind").value;
    // explain: a cluster index gives each hit's truths (the bars) only with it.
    const answer = await api("search", { ...body, rewrite, dense: true, explain: true });
    const tree = await queryTree(answer);
    const terms = termPolarity(tree, asList(answer.terms));
    showQuery(answer, terms);
    showWarnings([...asList(answer.warnings), ...asList(answer.rewrite && answer.rewrite.warnings)]);
    showColumns(answer, terms, body);
    setStatus(`answered in ${Math.round(performance.now() - started)} ms`);
    await showRequest(answer.query, body);
  } catch (problem) {
    setStatus("");
    clearResults(); // what is left of the last search would look like this one's
    showError(problem);
  } finally {
    // How many searches have finished: what a test (or a user script) waits on.
    document.body.dataset.searches = String(Number(document.body.dataset.searches || 0) + 1);
  }
}

async function queryTree(answer) {
  if (answer.rewrite && answer.rewrite.tree) return answer.rewrite.tree;
  if (typeof answer.query !== "string") return null;
  const parsed = await api("parse", { query: answer.query });
  return parsed ? parsed.tree : null;
}

// -- the query: which terms are negated ------------------------------------------------------

// Each term and whether every occurrence sits under an odd number of NOTs (itlr's
// Query.negated_terms). Unknown node kinds are walked through, not refused.
function termPolarity(tree, order) {
  const seen = new Map();
  const walk = (node, negated) => {
    if (Array.isArray(node)) {
      for (const child of node) walk(child, negated);
      return;
    }
    if (!node || typeof node !== "object") return;
    if (typeof node.term === "string") {
      const before = seen.get(node.term);
      seen.set(node.term, before === undefined ? negated : before && negated);
      return;
    }
    for (const [key, child] of Object.entries(node)) {
      if (key === "span" || key === "weight") continue;
      walk(child, key === "not" ? !negated : negated);
    }
  };
  walk(tree, false);
  const names = order.length ? order : [...seen.keys()];
  return names.map((name) => ({ name, negated: seen.get(name) === true }));
}

function showQuery(answer, terms) {
  $("query-info").hidden = false;
  const rewrite = answer.rewrite;
  const rewritten = Boolean(rewrite && rewrite.method && rewrite.method !== "query");
  $("rewritten").hidden = !rewritten;
  if (rewritten) {
    $("rewrite-method").textContent = String(rewrite.method);
    $("rewritten-query").textContent = String(answer.query);
  }
  const box = $("terms");
  box.replaceChildren();
  for (const term of terms) {
    const chip = document.createElement("span");
    chip.className = term.negated ? "term negated" : "term";
    chip.dataset.term = term.name;
    chip.textContent = term.negated ? `NOT ${term.name}` : term.name;
    box.append(chip);
  }
}

function showWarnings(warnings) {
  const list = $("warnings");
  list.replaceChildren(...warnings.map((text) => item(String(text))));
  $("warnings-box").hidden = warnings.length === 0;
}

// -- the two columns -------------------------------------------------------------------------

function showColumns(answer, terms, body) {
  const itlrHits = asList(answer.hits);
  const dense = answer.dense && typeof answer.dense === "object" ? answer.dense : {};
  const denseHits = asList(dense.hits);
  const itlrRank = new Map(itlrHits.map((hit, at) => [hit.id, at + 1]));
  const denseRank = new Map(denseHits.map((hit, at) => [hit.id, at + 1]));
  const marker = highlighter(terms);

  $("dense-meta").textContent =
    typeof dense.text === "string" ? `embedded whole: ${dense.text}` : "";
  const proved = answer.exact === true ? "top k proved exact" : answer.exact === false ? "top k not proved exact" : "";
  $("itlr-meta").textContent = [`query: ${answer.query}`, proved].filter(Boolean).join(" · ");

  $("dense-hits").replaceChildren(
    ...denseHits.map((hit, at) => {
      const badges = [];
      const other = itlrRank.get(hit.id);
      if (hit.itlr_score === null) {
        badges.push(["dropped", body.hard_filter !== undefined ? "dropped by the hard filter" : "dropped by itlr"]);
      } else if (other) {
        badges.push(["shared", `itlr #${other}`]);
      } else {
        badges.push(["missing", "not in itlr's top k"]);
      }
      // The engine's kNN score: the cosine (embedded), (1 + cosine) / 2 (OpenSearch's cosinesimil).
      const scores = [`dense ${number(hit.score)}`];
      if (typeof hit.itlr_score === "number") scores.push(`itlr ${number(hit.itlr_score)}`);
      return hitItem(hit, at + 1, scores, badges, terms, marker);
    }),
  );
  $("itlr-hits").replaceChildren(
    ...itlrHits.map((hit, at) => {
      const other = denseRank.get(hit.id);
      const badges = [other ? ["shared", `dense #${other}`] : ["missing", "not in dense's top k"]];
      return hitItem(hit, at + 1, [`score ${number(hit.score)}`], badges, terms, marker);
    }),
  );
  if (!denseHits.length) $("dense-hits").append(item("no hits", "empty"));
  if (!itlrHits.length) $("itlr-hits").append(item("no hits", "empty"));
}

function hitItem(hit, rank, scores, badges, terms, marker) {
  const li = document.createElement("li");
  li.className = "hit";
  li.dataset.id = String(hit.id);
  const head = document.createElement("div");
  head.className = "hit-head";
  head.append(span("rank", `${rank}`), span("hit-id", String(hit.id)));
  for (const score of scores) head.append(span("score", score));
  for (const [kind, text] of badges) head.append(span(`badge ${kind}`, text));
  li.append(head, bars(hit.truths, terms));
  const fields = fieldsLine(hit.fields);
  if (fields) li.append(fields);
  const text = document.createElement("p");
  text.className = "hit-text";
  marker(text, typeof hit.text === "string" ? hit.text : "");
  li.append(text);
  return li;
}

// A few of the hit's stored fields, as text (what a filter would be written against).
function fieldsLine(fields) {
  if (!fields || typeof fields !== "object" || Array.isArray(fields)) return null;
  const shownFields = Object.entries(fields).slice(0, MAX_FIELDS);
  if (!shownFields.length) return null;
  const line = document.createElement("p");
  line.className = "hit-fields muted";
  line.textContent = shownFields
    .map(([name, value]) => {
      const text = typeof value === "string" ? value : JSON.stringify(value);
      return `${name}: ${text.length > 80 ? `${text.slice(0, 79)}…` : text}`;
    })
    .join(" · ");
  return line;
}

// One bar per term: its truth value, NOT terms marked (a high truth there pushes the hit down).
function bars(truths, terms) {
  const box = document.createElement("div");
  box.className = "bars";
  const known = truths && typeof truths === "object" ? truths : {};
  for (const term of terms) {
    const value = known[term.name];
    const truth = typeof value === "number" && Number.isFinite(value) ? value : null;
    const bar = document.createElement("div");
    bar.className = term.negated ? "bar negated" : "bar";
    bar.dataset.term = term.name;
    bar.dataset.negated = String(term.negated);
    bar.dataset.truth = truth === null ? "" : String(truth);
    bar.title = term.negated
      ? `NOT ${term.name}: truth ${number(truth)}, so NOT gives ${number(truth === null ? null : 1 - truth)}`
      : `${term.name}: truth ${number(truth)}`;
    const fill = document.createElement("span");
    fill.className = "bar-fill";
    fill.style.width = `${Math.round(Math.min(1, Math.max(0, truth ?? 0)) * 100)}%`;
    const track = span("bar-track", "");
    track.append(fill);
    bar.append(span("bar-label", term.negated ? `NOT ${term.name}` : term.name), track, span("bar-value", number(truth)));
    box.append(bar);
  }
  return box;
}

// Marks the words of the query's terms in a hit's text: positive terms' words in one colour,
// NOT terms' in another. Built from text nodes, so a document's markup stays text.
function highlighter(terms) {
  const positive = new Set();
  const negative = new Set();
  for (const term of terms) {
    for (const word of term.name.toLowerCase().match(WORD) || []) {
      if (STOPWORDS.has(word)) continue;
      (term.negated ? negative : positive).add(word);
    }
  }
  return (element, text) => {
    let last = 0;
    for (const match of text.matchAll(WORD)) {
      const word = match[0].toLowerCase();
      const kind = positive.has(word) ? "pos" : negative.has(word) ? "neg" : null;
      if (!kind) continue;
      if (match.index > last) element.append(text.slice(last, match.index));
      const mark = document.createElement("mark");
      mark.className = kind;
      mark.textContent = match[0];
      element.append(mark);
      last = match.index + match[0].length;
    }
    if (last < text.length) element.append(text.slice(last));
  };
}

// -- the request, for Dev Tools --------------------------------------------------------------

async function showRequest(query, body) {
  const box = $("request");
  if (typeof query !== "string") {
    box.hidden = true;
    return;
  }
  const { k, mode, hard_filter, hard_filter_rule, filter } = body;
  const translated = await api("translate", { query, k, mode, hard_filter, hard_filter_rule, filter });
  const requests = asList(translated && translated.requests);
  const last = requests[requests.length - 1];
  if (!last) {
    box.hidden = true;
    return;
  }
  $("request-text").textContent =
    typeof last.console === "string"
      ? last.console
      : `${last.method} ${last.path}\n${JSON.stringify(last.body, null, 2)}`;
  $("request-warnings").replaceChildren(...asList(translated.warnings).map((text) => item(String(text))));
  $("copy-status").textContent = "";
  box.hidden = false;
}

async function copyRequest() {
  const text = $("request-text").textContent;
  try {
    await navigator.clipboard.writeText(text);
    $("copy-status").textContent = "copied";
  } catch (_) {
    // No clipboard permission (an insecure origin, a browser policy): select it for Ctrl+C.
    const range = document.createRange();
    range.selectNodeContents($("request-text"));
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    $("copy-status").textContent = "selected: press Ctrl+C to copy";
  }
}

// -- errors and status -----------------------------------------------------------------------

function showError(problem) {
  const payload = problem instanceof ApiError ? problem.payload : {};
  $("error").hidden = false;
  $("error-message").textContent = problem instanceof Error ? problem.message : String(problem);
  // A syntax error: the query with a caret under the position (the CLI's caret lines).
  const caret = typeof payload.caret === "string" ? payload.caret : "";
  $("caret").textContent = caret;
  $("caret").hidden = caret === "";
  if (Number.isInteger(payload.position)) {
    const at = Math.min(payload.position, $("query").value.length);
    $("query").setSelectionRange(at, Math.min(at + 1, $("query").value.length));
  }
}

function clearResults() {
  for (const id of ["dense-hits", "itlr-hits", "warnings", "terms"]) $(id).replaceChildren();
  for (const id of ["dense-meta", "itlr-meta"]) $(id).textContent = "";
  for (const id of ["query-info", "warnings-box", "request"]) $(id).hidden = true;
}

function clearError() {
  $("error").hidden = true;
  $("error-message").textContent = "";
  $("caret").textContent = "";
}

function setStatus(text) {
  $("status").textContent = text;
}

// -- small helpers ---------------------------------------------------------------------------

function asList(value) {
  return Array.isArray(value) ? value : [];
}

function number(value) {
  return typeof value === "number" && Number.isFinite(value) ? value.toFixed(3) : "–";
}

function span(className, text) {
  const element = document.createElement("span");
  element.className = className;
  element.textContent = text;
  return element;
}

function item(text, className) {
  const li = document.createElement("li");
  if (className) li.className = className;
  li.textContent = text;
  return li;
}

// What the service serves: the index, its engine and size, and whether an LLM rewrites.
async function showIndex() {
  indexLoading = true;
  try {
    const health = await api("healthz");
    const count = typeof health.count === "number" ? `${health.count} documents` : "";
    const name = health.index ?? health.name ?? "?";
    $("index-info").textContent = [`index ${name}`, health.engine, count].filter(Boolean).join(" · ");
    const llm = asList(health.rewriters).includes("llm");
    $("input-kind").querySelector('option[value="llm"]').disabled = !llm;
    indexShown = true;
  } catch (problem) {
    $("index-info").textContent = "";
    showError(problem);
  } finally {
    indexLoading = false;
  }
}

let indexShown = false;
let indexLoading = false;

async function start() {
  $("search-form").addEventListener("submit", search);
  $("token-form").addEventListener("submit", tokenGiven);
  $("token-dialog").addEventListener("cancel", tokenRefused);
  $("copy-request").addEventListener("click", copyRequest);
  $("query").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) search(event);
  });
  await showIndex();
  document.body.dataset.ready = "true";
}

start();
