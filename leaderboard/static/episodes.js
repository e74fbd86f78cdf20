// The episode browser of a run page, in plain JavaScript.
// Data arrives as script files that call TASKHUB.index(n, columns) and TASKHUB.page(n, packed)
// (fetch() of local files is refused by browsers; script tags work from file:// too). Index
// chunks load one after the other in the background; a page of full records loads when one of
// its episodes is opened. Everything from the records is written with textContent: a model
// reply or an observation holding markup is shown as text, never parsed as HTML.
"use strict";
(function () {
  var root = document.getElementById("episodes");
  if (!root) return;
  var cfg = {
    base: root.getAttribute("data-base"),
    count: Number(root.getAttribute("data-count")),
    chunkSize: Number(root.getAttribute("data-chunk-size")),
    chunks: Number(root.getAttribute("data-chunks")),
    pageSize: Number(root.getAttribute("data-page-size")),
    outcomes: root.getAttribute("data-outcomes").split(","),
  };
  var PER_VIEW = 50;
  var rows = [];
  var chunksLoaded = 0;
  var nextChunk = 0;
  var pages = {};
  var waiting = {};
  var matches = [];
  var offset = 0;
  var failed = null;
  var renderQueued = false;
  var openIndex = null;

  var el = function (tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  };
  var $ = function (id) { return document.getElementById(id); };
  var pad = function (n, width) { var s = String(n); while (s.length < width) s = "0" + s; return s; };
  var fmt = function (v, digits) {
    if (v === null || v === undefined) return "–";
    if (typeof v !== "number") return String(v);
    return v.toFixed(digits === undefined ? 3 : digits);
  };

  function load(src) {
    var script = document.createElement("script");
    script.src = src;
    script.charset = "utf-8";
    script.onerror = function () {
      failed = "Could not load " + src + ".";
      queueRender();
    };
    document.head.appendChild(script);
  }

  function loadNextChunk() {
    if (nextChunk < cfg.chunks) {
      load(cfg.base + "index-" + pad(nextChunk, 4) + ".js");
      nextChunk += 1;
    }
  }

  window.TASKHUB = {
    index: function (n, d) {
      var first = n * cfg.chunkSize;
      for (var j = 0; j < d.t.length; j++) {
        rows.push({
          i: first + j,
          task: d.tasks[d.t[j]],
          sample: d.s[j],
          outcome: cfg.outcomes[d.o[j]],
          reward: d.r[j],
          success: d.k[j],
          steps: d.n[j],
          error: d.e[j] < 0 ? null : d.errors[d.e[j]],
        });
      }
      chunksLoaded += 1;
      queueRender();
      loadNextChunk();
      if (openIndex === null) openFromHash();
    },
    page: function (n, packed) {
      inflate(packed).then(function (records) {
        pages[n] = records;
        (waiting[n] || []).forEach(function (callback) { callback(records); });
        delete waiting[n];
      }, function (error) {
        failed = "Could not read episode page " + n + " (" + error.message + ").";
        queueRender();
      });
    },
  };

  // A page is its records' lines, gzip-compressed then base64-encoded: inflated here.
  function inflate(packed) {
    if (typeof DecompressionStream === "undefined") {
      return Promise.reject(new Error("this browser cannot inflate gzip data"));
    }
    var binary = atob(packed);
    var bytes = new Uint8Array(binary.length);
    for (var i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text().then(function (text) {
      return text.split("\n").map(function (line) { return JSON.parse(line); });
    });
  }

  function filters() {
    var min = $("ep-min").value, max = $("ep-max").value;
    return {
      task: $("ep-task").value.trim().toLowerCase(),
      outcome: $("ep-outcome").value,
      min: min === "" ? null : Number(min),
      max: max === "" ? null : Number(max),
      order: $("ep-order").value,
    };
  }

  function select() {
    var f = filters();
    matches = rows.filter(function (r) {
      if (f.task && r.task.toLowerCase().indexOf(f.task) < 0) return false;
      if (f.outcome && r.outcome !== f.outcome) return false;
      if (f.min !== null && (r.reward === null || r.reward < f.min)) return false;
      if (f.max !== null && (r.reward === null || r.reward > f.max)) return false;
      return true;
    });
    var byReward = function (sign) {
      return function (a, b) {
        if (a.reward === null || b.reward === null) return a.reward === b.reward ? a.i - b.i : a.reward === null ? 1 : -1;
        return sign * (a.reward - b.reward) || a.i - b.i;
      };
    };
    if (f.order === "task") {
      matches.sort(function (a, b) { return a.task < b.task ? -1 : a.task > b.task ? 1 : a.sample - b.sample || a.i - b.i; });
    } else if (f.order === "reward-desc") {
      matches.sort(byReward(-1));
    } else if (f.order === "reward-asc") {
      matches.sort(byReward(1));
    }
  }

  function queueRender() {
    if (renderQueued) return;
    renderQueued = true;
    window.setTimeout(function () { renderQueued = false; select(); renderList(); }, 30);
  }

  function renderList() {
    if (offset >= matches.length) offset = Math.max(0, Math.floor((matches.length - 1) / PER_VIEW) * PER_VIEW);
    var body = $("ep-list").tBodies[0];
    body.replaceChildren();
    matches.slice(offset, offset + PER_VIEW).forEach(function (r) {
      var tr = el("tr");
      tr.setAttribute("data-index", String(r.i));
      if (r.i === openIndex) tr.className = "selected";
      tr.appendChild(el("td", "num", r.i + 1));
      var task = el("td");
      var link = el("a", null, r.task);
      link.href = "#episode=" + r.i;
      task.appendChild(link);
      tr.appendChild(task);
      tr.appendChild(el("td", "num", r.sample));
      var outcome = el("td");
      outcome.appendChild(el("span", "outcome o-" + r.outcome, r.outcome));
      tr.appendChild(outcome);
      tr.appendChild(el("td", "num", fmt(r.reward)));
      tr.appendChild(el("td", "num", r.steps));
      tr.appendChild(el("td", "error", r.error || ""));
      tr.addEventListener("click", function (event) {
        if (event.target.closest("a")) return;
        window.location.hash = "episode=" + r.i;
      });
      body.appendChild(tr);
    });
    var loaded = rows.length < cfg.count ? " (" + rows.length.toLocaleString("en") + " of " + cfg.count.toLocaleString("en") + " episodes loaded)" : "";
    var text = matches.length
      ? "Episodes " + (offset + 1).toLocaleString("en") + "–" + Math.min(offset + PER_VIEW, matches.length).toLocaleString("en") +
        " of " + matches.length.toLocaleString("en") + " matching" + loaded + "."
      : cfg.count === 0 ? "This run has no episode." : "No episode matches" + loaded + ".";
    $("ep-status").textContent = failed ? failed + " " + text : text;
    $("ep-prev").disabled = offset === 0;
    $("ep-next").disabled = offset + PER_VIEW >= matches.length;
  }

  function withRecord(index, callback) {
    var page = Math.floor(index / cfg.pageSize);
    var pick = function (records) { callback(records[index - page * cfg.pageSize]); };
    if (pages[page]) return pick(pages[page]);
    var first = !waiting[page];
    (waiting[page] = waiting[page] || []).push(pick);
    if (first) load(cfg.base + "page-" + pad(page, 5) + ".js");
  }

  // --- the trajectory view ---
  // JSON laid out for reading: what fits on a line stays on one line.
  function compact(value, indent) {
    var flat = JSON.stringify(value);
    if (flat === undefined) return "null";
    if (flat.length + indent.length <= 88 || value === null || typeof value !== "object") return flat;
    var inner = indent + "  ";
    if (Array.isArray(value)) {
      return "[\n" + value.map(function (v) { return inner + compact(v, inner); }).join(",\n") + "\n" + indent + "]";
    }
    return "{\n" + Object.keys(value).map(function (k) {
      return inner + JSON.stringify(k) + ": " + compact(value[k], inner);
    }).join(",\n") + "\n" + indent + "}";
  }
  function json(value) { return el("pre", "json", compact(value, "")); }

  // An object as a field list; text with line breaks (a grid, a transcript) keeps its lines.
  function fields(value) {
    if (value === null || typeof value !== "object" || Array.isArray(value)) return json(value);
    var keys = Object.keys(value);
    if (!keys.length) return json(value);
    var dl = el("dl", "fields");
    keys.forEach(function (k) {
      dl.appendChild(el("dt", null, k));
      var dd = el("dd");
      var v = value[k];
      dd.appendChild(typeof v === "string" && v.indexOf("\n") >= 0 ? el("pre", "json text", v) : el("code", null, compact(v, "")));
      dl.appendChild(dd);
    });
    return dl;
  }

  function facts(pairs) {
    var dl = el("dl");
    pairs.forEach(function (p) {
      if (p[1] === undefined) return;
      dl.appendChild(el("dt", null, p[0]));
      var dd = el("dd");
      if (p[1] instanceof Node) dd.appendChild(p[1]); else dd.textContent = p[1] === null ? "–" : String(p[1]);
      dl.appendChild(dd);
    });
    return dl;
  }

  function section(parent, title, body) {
    parent.appendChild(el("h3", null, title));
    parent.appendChild(body);
  }

  function renderEpisode(index, record) {
    var view = $("trajectory");
    view.replaceChildren();
    view.hidden = false;
    var close = el("button", "close", "Close");
    close.type = "button";
    close.addEventListener("click", function () {
      history.replaceState(null, "", window.location.pathname + window.location.search);
      view.hidden = true;
      openIndex = null;
      renderList();
    });
    view.appendChild(close);
    if (!record) {
      view.appendChild(el("p", "error", "Episode " + (index + 1) + " is not in this run."));
      return;
    }
    view.appendChild(el("h2", null, "Episode " + (index + 1) + ": " + record.task_id + " (sample " + record.sample + ")"));
    var outcome = el("span", "outcome o-" + record.outcome, record.outcome);
    var error = record.error ? record.error.type + " (" + record.error.boundary + (record.error.code ? ", " + record.error.code : "") + "): " + record.error.message : null;
    view.appendChild(facts([
      ["outcome", outcome],
      ["reward", fmt(record.reward)],
      ["success", record.success === null ? "–" : record.success ? "yes" : "no"],
      ["env reward", fmt(record.env_reward)],
      ["steps", record.num_steps + (record.terminated ? ", terminated by the env" : "") + (record.truncated ? ", truncated at the step limit" : "")],
      ["attempts", record.attempts],
      ["error", error ? el("span", "error", error) : undefined],
      ["episode id", record.episode_id],
      ["seed", record.seed],
      ["started", record.started_at],
      ["duration", fmt(record.duration_s, 2) + " s (env " + fmt(record.env_time_s, 2) + " s, model " + fmt(record.model_time_s, 2) + " s)"],
      ["tokens", record.usage ? record.usage.prompt_tokens + " prompt + " + record.usage.completion_tokens + " completion in " + record.usage.calls + " calls" : undefined],
    ]));

    var components = record.reward_components || [];
    if (components.length) {
      var table = el("table", "compact");
      var head = el("tr");
      ["component", "value", "weight", "gate", "error", "details"].forEach(function (h) { head.appendChild(el("th", null, h)); });
      table.appendChild(el("thead")).appendChild(head);
      var body = table.appendChild(el("tbody"));
      components.forEach(function (c) {
        var tr = el("tr");
        tr.appendChild(el("td", null, c.name));
        tr.appendChild(el("td", "num", fmt(c.value)));
        tr.appendChild(el("td", "num", c.weight));
        tr.appendChild(el("td", null, c.gate ? "gate" : ""));
        tr.appendChild(el("td", "error", c.error || ""));
        var details = el("td");
        if (c.details) details.appendChild(json(c.details));
        tr.appendChild(details);
        body.appendChild(tr);
      });
      section(view, "Reward components", table);
    }

    section(view, "Reset", fields(record.reset_payload));
    if (record.initial_observation) section(view, "Initial observation", fields(record.initial_observation));
    if (record.reset_metadata) section(view, "Reset metadata", json(record.reset_metadata));

    var steps = el("div", "steps");
    (record.steps || []).forEach(function (step, n) {
      var box = el("div", "step" + (step.done ? " final" : ""));
      box.appendChild(el("h4", null, "Step " + step.index + " · reward " + fmt(step.reward) + (step.done ? " · done" : "") +
        " · env " + fmt(1000 * (step.latency_s || 0), 0) + " ms" + (step.model_latency_s ? " · model " + fmt(step.model_latency_s, 2) + " s" : "")));
      if (step.reply !== null && step.reply !== undefined) {
        box.appendChild(el("div", "n", "model reply"));
        box.appendChild(el("pre", "json", step.reply));
      }
      (step.format_errors || []).forEach(function (message) { box.appendChild(el("p", "error", "rejected reply: " + message)); });
      box.appendChild(el("div", "n", "action"));
      box.appendChild(fields(step.action));
      box.appendChild(el("div", "n", "observation"));
      box.appendChild(fields(step.observation));
      if (step.metadata) { box.appendChild(el("div", "n", "metadata")); box.appendChild(json(step.metadata)); }
      steps.appendChild(box);
    });
    section(view, "Steps (" + (record.steps || []).length + ")", steps);

    var messages = el("div", "messages");
    (record.messages || []).forEach(function (m) {
      var box = el("div", "message");
      box.appendChild(el("div", "role", m.role));
      box.appendChild(el("pre", null, m.content));
      messages.appendChild(box);
    });
    if ((record.messages || []).length) section(view, "Messages (" + record.messages.length + ")", messages);
    section(view, "Task", json(record.task));
    view.scrollIntoView({ block: "start" });
  }

  function openFromHash() {
    var match = /^#episode=(\d+)$/.exec(window.location.hash);
    if (!match) return;
    var index = Number(match[1]);
    if (index >= cfg.count) return;
    openIndex = index;
    renderList();
    withRecord(index, function (record) { if (openIndex === index) renderEpisode(index, record); });
  }

  ["ep-task", "ep-outcome", "ep-min", "ep-max", "ep-order"].forEach(function (id) {
    $(id).addEventListener("input", function () { offset = 0; queueRender(); });
  });
  $("episode-filters").addEventListener("submit", function (event) { event.preventDefault(); });
  $("ep-prev").addEventListener("click", function () { offset = Math.max(0, offset - PER_VIEW); renderList(); });
  $("ep-next").addEventListener("click", function () { offset += PER_VIEW; renderList(); });
  window.addEventListener("hashchange", openFromHash);
  if (cfg.chunks === 0) renderList(); else loadNextChunk();
  openFromHash();
})();
