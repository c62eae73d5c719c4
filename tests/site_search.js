// node site_search.js <built site> <query>: the titles of the site's search results for <query>, best
// first, as its search page computes them (the site's own searchtools.js, scorer and index).
const fs = require("fs");
const vm = require("vm");

const [site, query] = process.argv.slice(2);
const element = () => ({ appendChild: (x) => x, classList: { add() {} }, setAttribute() {}, dataset: {},
                         style: {}, lastChild: null });
const page = {
  console, URLSearchParams, Set, Map,
  location: { search: "?q=" + encodeURIComponent(query) },
  setTimeout() {},
  localStorage: { setItem() {} },
  document: { documentElement: { dataset: { content_root: "" } }, getElementById: () => null,
              createElement: element, body: element(), addEventListener() {}, readyState: "loading" },
  Documentation: { gettext: (s) => s, ngettext: (s) => s },
  DOCUMENTATION_OPTIONS: { FILE_SUFFIX: ".html", LINK_SUFFIX: ".html", HAS_SOURCE: false },
  SPHINX_HIGHLIGHT_ENABLED: false,
  _: (s) => s,
  _ready: () => {},
};
page.window = page;
vm.createContext(page);
for (const file of ["language_data.js", "searchtools.js"]) {
  // top-level declarations become properties of the page, as scripts' globals are in a browser
  const source = fs.readFileSync(`${site}/_static/${file}`, "utf8")
    .replace(/^(const|let) /gm, "var ").replace(/^class (\w+)/gm, "var $1 = class $1");
  vm.runInContext(source, page);
}
vm.runInContext("Search.setIndex = (index) => { Search._index = index; };", page);
vm.runInContext(fs.readFileSync(`${site}/searchindex.js`, "utf8"), page);
const results = vm.runInContext(
  `Search._performSearch(...Search._parseQuery(${JSON.stringify(query)}))`, page);
// the page shows the results from the end of the list
for (const result of results.slice().reverse().slice(0, 10)) console.log(result[1]);
