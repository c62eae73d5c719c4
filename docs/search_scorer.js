// Search results: the entry named by the query comes first. A search for "sum" lists nx.sum, then the
// entries named sum in nx's submodules and NamedArray.sum, before the names that only contain it (nansum,
// cumsum, psum) and the pages that mention it.
var Scorer = {
  score: (result) => {
    const [docname, title, anchor, descr, score, filename, kind] = result;
    if (kind !== "object") return score;
    const query = (new URLSearchParams(window.location.search).get("q") || "").trim().toLowerCase();
    const name = title.toLowerCase();
    const short = query.startsWith("nx.") ? query.slice(3) : query;
    if (name === "nx." + short) return score + 30;
    if (name.endsWith("." + short) && name.split(".").length === 3) return score + 20;
    return score;
  },

  // the defaults of Sphinx's search
  objNameMatch: 11,
  objPartialMatch: 6,
  objPrio: {
    0: 15,
    1: 5,
    2: -5,
  },
  objPrioDefault: 0,
  title: 15,
  partialTitle: 7,
  term: 5,
  partialTerm: 2,
};
