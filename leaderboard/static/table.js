// Sortable and filterable tables, in plain JavaScript.
// <table class="sortable">: click (or Enter on) a header to sort by its column; cells sort by
// their data-v attribute when they have one (numbers; empty sorts last), else by their text.
// <input data-filter="TABLE_ID">: hides the rows of that table whose text does not contain it.
"use strict";
(function () {
  function key(row, index) {
    var cell = row.cells[index];
    if (!cell) return null;
    var v = cell.getAttribute("data-v");
    if (v !== null) return v === "" ? null : Number(v);
    return cell.textContent.trim().toLowerCase();
  }

  function sort(table, th) {
    var index = Array.prototype.indexOf.call(th.parentNode.cells, th);
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var current = th.getAttribute("aria-sort");
    var numeric = rows.some(function (r) { return typeof key(r, index) === "number"; });
    var ascending = current ? current === "descending" : !numeric;
    rows.sort(function (a, b) {
      var x = key(a, index), y = key(b, index);
      if (x === null || y === null) return x === y ? 0 : x === null ? 1 : -1;
      if (x < y) return ascending ? -1 : 1;
      if (x > y) return ascending ? 1 : -1;
      return 0;
    });
    Array.prototype.forEach.call(th.parentNode.cells, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    rows.forEach(function (r) { body.appendChild(r); });
  }

  document.querySelectorAll("table.sortable").forEach(function (table) {
    if (!table.tHead || !table.tBodies.length) return;
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
      th.tabIndex = 0;
      th.title = th.title || "Sort by this column";
      th.addEventListener("click", function (event) {
        if (event.target.closest("a")) return;
        sort(table, th);
      });
      th.addEventListener("keydown", function (event) {
        if (event.key === "Enter") sort(table, th);
      });
    });
  });

  document.querySelectorAll("input[data-filter]").forEach(function (input) {
    var table = document.getElementById(input.getAttribute("data-filter"));
    if (!table) return;
    input.addEventListener("input", function () {
      var query = input.value.trim().toLowerCase();
      Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
        row.hidden = query !== "" && row.textContent.toLowerCase().indexOf(query) < 0;
      });
    });
  });
})();
