#include "plumb/verify/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "plumb/util/error.h"

#ifndef PLUMB_GIT_REV
#define PLUMB_GIT_REV "unknown"
#endif
#ifndef PLUMB_BUILD_TYPE
#define PLUMB_BUILD_TYPE "unknown"
#endif
#ifndef PLUMB_CXX_FLAGS
#define PLUMB_CXX_FLAGS "unknown"
#endif

namespace plumb::verify {

bool VerifyReport::taps_pass() const {
  return std::all_of(taps.begin(), taps.end(), [](const TapResult& t) { return !t.compared || t.pass; });
}

std::string VerifyReport::first_failing_tap() const {
  for (const TapResult& t : taps)
    if (t.compared && !t.pass) return t.name;
  return {};
}

int64_t VerifyReport::first_greedy_divergence() const {
  if (!greedy_compared) return -1;
  const std::size_t n = std::max(greedy_got.size(), greedy_ref.size());
  for (std::size_t i = 0; i < n; ++i)
    if (i >= greedy_got.size() || i >= greedy_ref.size() || greedy_got[i] != greedy_ref[i])
      return static_cast<int64_t>(i);
  return -1;
}

Facts build_facts() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
#if defined(__clang__)
  const std::string compiler = fmt::format("clang {}", __clang_version__);
#elif defined(__GNUC__)
  const std::string compiler = fmt::format("gcc {}", __VERSION__);
#else
  const std::string compiler = "unknown";
#endif
  return {{"plumb_version", "0.1.0"},
          {"git_rev", PLUMB_GIT_REV},
          {"build_type", PLUMB_BUILD_TYPE},
          {"compiler", compiler},
          {"cxx_flags", PLUMB_CXX_FLAGS},
          {"date_utc", date}};
}

namespace {

// JSON has no NaN/inf: non-finite metrics are written as null (and such a tap has failed).
nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json facts_json(const Facts& f) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : f) j[k] = v;
  return j;
}

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '&':
        o += "&amp;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

std::string md_escape(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '|' ? std::string("\\|") : std::string(1, c);
  return o;
}

std::string fmt_num(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : std::string("nan/inf"); }

// One point per layer: "layer.7.attn.q" belongs to "layer 7"; taps outside layers (embed,
// final_norm, logits) are their own points. The chart shows the worst tap of each point.
struct Group {
  std::string label;
  double worst_cos = 1, worst_rel = 0;
  std::string worst_tap;
};

std::vector<Group> per_layer(const std::vector<TapResult>& taps) {
  std::vector<Group> g;
  for (const TapResult& t : taps) {
    if (!t.compared) continue;
    std::string label = t.name;
    if (t.name.rfind("layer.", 0) == 0) {
      const auto dot = t.name.find('.', 6);
      label = "layer " + t.name.substr(6, dot == std::string::npos ? std::string::npos : dot - 6);
    }
    if (g.empty() || g.back().label != label) g.push_back({label, 1, 0, {}});
    Group& cur = g.back();
    const double cos = std::isfinite(t.m.rel_l2) ? t.m.cosine : -1;
    if (cos < cur.worst_cos || cur.worst_tap.empty()) cur.worst_cos = cos, cur.worst_tap = t.name;
    cur.worst_rel = std::max(cur.worst_rel, std::isfinite(t.m.rel_l2) ? t.m.rel_l2 : 1e9);
  }
  return g;
}

// Both series on one log axis of "error": 1 - cosine and rel L2, from 1e-9 up to 10.
std::string svg_chart(const VerifyReport& r) {
  const std::vector<Group> g = per_layer(r.taps);
  if (g.empty()) return "<p>No taps were compared.</p>";
  const double W = 900, H = 320, L = 60, R = 20, T = 20, B = 90, lo = -9, hi = 1;
  auto x = [&](std::size_t i) { return L + (g.size() == 1 ? 0.5 : double(i) / double(g.size() - 1)) * (W - L - R); };
  auto y = [&](double v) {
    const double l = std::clamp(std::log10(std::max(v, 1e-12)), lo, hi);
    return T + (hi - l) / (hi - lo) * (H - T - B);
  };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-size=\"11\" "
      "font-family=\"sans-serif\">\n",
      W, H);
  for (int e = int(lo); e <= int(hi); ++e)
    s += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#ddd\"/><text x=\"{3}\" "
        "y=\"{4:.1f}\" text-anchor=\"end\">1e{5}</text>\n",
        L, W - R, y(std::pow(10.0, e)), L - 4, y(std::pow(10.0, e)) + 4, e);
  s += fmt::format(
      "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#c00\" stroke-dasharray=\"4 3\"/>"
      "<text x=\"{1}\" y=\"{3:.1f}\" text-anchor=\"end\" fill=\"#c00\">1 - threshold</text>\n",
      L, W - R, y(1 - r.threshold), y(1 - r.threshold) - 3);
  auto series = [&](auto value, const char* color, const char* what) {
    std::string pts;
    for (std::size_t i = 0; i < g.size(); ++i) pts += fmt::format("{:.1f},{:.1f} ", x(i), y(value(g[i])));
    std::string o =
        fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n", color, pts);
    for (std::size_t i = 0; i < g.size(); ++i)
      o += fmt::format(
          "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"><title>{}: {} {} (worst tap {})</title></circle>\n",
          x(i), y(value(g[i])), color, html_escape(g[i].label), what, fmt_num(value(g[i])),
          html_escape(g[i].worst_tap));
    return o;
  };
  s += series([](const Group& v) { return 1 - v.worst_cos; }, "#1f77b4", "1 - min cosine");
  s += series([](const Group& v) { return v.worst_rel; }, "#ff7f0e", "max rel L2");
  for (std::size_t i = 0; i < g.size(); ++i)
    s += fmt::format("<text transform=\"translate({:.1f},{}) rotate(-60)\" text-anchor=\"end\">{}</text>\n", x(i) + 3,
                     H - B + 12, html_escape(g[i].label));
  s += fmt::format(
      "<text x=\"{}\" y=\"12\" fill=\"#1f77b4\">&#9679; 1 - min cosine</text><text x=\"{}\" y=\"12\" "
      "fill=\"#ff7f0e\">&#9679; max rel L2</text>\n</svg>\n",
      L, L + 140);
  return s;
}

std::string verdict(const VerifyReport& r) {
  if (r.passed()) return "PASS";
  std::string why;
  if (!r.taps_pass()) why += "first failing tap: " + r.first_failing_tap();
  if (!r.greedy_agree())
    why += fmt::format("{}greedy tokens diverge at step {}", why.empty() ? "" : "; ", r.first_greedy_divergence());
  return "FAIL (" + why + ")";
}

}  // namespace

std::string report_json(const VerifyReport& r) {
  nlohmann::json j;
  j["passed"] = r.passed();
  j["verdict"] = verdict(r);
  j["first_failing_tap"] =
      r.first_failing_tap().empty() ? nlohmann::json(nullptr) : nlohmann::json(r.first_failing_tap());
  j["model"] = r.model;
  j["model_type"] = r.model_type;
  j["backend"] = r.backend;
  j["against"] = r.against;
  j["numerics"] = r.numerics;
  j["threshold"] = r.threshold;
  j["ids"] = r.ids;
  nlohmann::json taps = nlohmann::json::array();
  for (const TapResult& t : r.taps)
    taps.push_back({{"name", t.name},
                    {"shape", t.shape},
                    {"compared", t.compared},
                    {"pass", t.pass},
                    {"informational", t.informational},
                    {"cosine", num(t.m.cosine)},
                    {"max_abs_diff", num(t.m.max_abs)},
                    {"max_abs_ref", num(t.m.max_ref)},
                    {"rel_l2", num(t.m.rel_l2)},
                    {"nan", t.m.nan},
                    {"differing", t.m.differing},
                    {"n", t.m.n},
                    {"note", t.note}});
  j["taps"] = taps;
  if (r.logits)
    j["logits"] = {{"positions", r.logits->positions},       {"max_abs_diff", num(r.logits->max_abs)},
                   {"max_abs_ref", num(r.logits->max_ref)},  {"rel_max_diff", num(r.logits->rel())},
                   {"argmax_agree", r.logits->argmax_agree}, {"argmax_got", r.logits->got_argmax},
                   {"argmax_ref", r.logits->ref_argmax}};
  else
    j["logits"] = nullptr;
  j["greedy"] = {{"compared", r.greedy_compared}, {"steps", r.steps},
                 {"agree", r.greedy_agree()},     {"first_divergence", r.first_greedy_divergence()},
                 {"tokens_got", r.greedy_got},    {"tokens_ref", r.greedy_ref}};
  j["facts"] = {{"tested", facts_json(r.facts_got)}, {"reference", facts_json(r.facts_ref)}};
  j["audit"] = facts_json(r.audit);
  j["notes"] = r.notes;
  return j.dump(2) + "\n";
}

std::string report_markdown(const VerifyReport& r) {
  std::string s = fmt::format("# plumb verify: {}\n\n", verdict(r));
  s += fmt::format("- model: `{}` ({})\n- tested: `{}`, reference: `{}`, numerics: {}\n- threshold: cosine >= {}\n",
                   r.model, r.model_type, r.backend, r.against, r.numerics, r.threshold);
  s += fmt::format("- prompt: {} tokens\n", r.ids.size());
  for (const std::string& n : r.notes) s += "- note: " + n + "\n";
  if (r.logits)
    s += fmt::format("\n## Logits\n\nmax |diff| = {} , max |ref| = {} , ratio = {}; argmax agrees at {}/{} positions\n",
                     fmt_num(r.logits->max_abs), fmt_num(r.logits->max_ref), fmt_num(r.logits->rel()),
                     r.logits->argmax_agree, r.logits->positions);
  s += "\n## Greedy tokens\n\n";
  if (!r.greedy_compared)
    s += "not compared (the reference is a dump, which holds no generated tokens)\n";
  else
    s += fmt::format("{} new tokens: {}\n\n- tested: {}\n- reference: {}\n", r.steps,
                     r.greedy_agree() ? "agree" : fmt::format("diverge at step {}", r.first_greedy_divergence()),
                     fmt::join(r.greedy_got, " "), fmt::join(r.greedy_ref, " "));
  s += "\n## Taps (forward order)\n\n| tap | shape | cosine | max abs diff | rel L2 | differing | result |\n"
       "|---|---|---|---|---|---|---|\n";
  for (const TapResult& t : r.taps)
    s += fmt::format("| {} | [{}] | {} | {} | {} | {} | {} |\n", md_escape(t.name), fmt::join(t.shape, ", "),
                     fmt_num(t.m.cosine), fmt_num(t.m.max_abs), fmt_num(t.m.rel_l2), t.m.differing,
                     !t.compared      ? "not compared: " + md_escape(t.note)
                     : t.informational ? "info: " + md_escape(t.note)
                     : t.pass          ? "pass"
                                       : "**FAIL**");
  auto facts = [&](const char* title, const Facts& f) {
    s += fmt::format("\n## {}\n\n", title);
    for (const auto& [k, v] : f) s += fmt::format("- {}: {}\n", k, md_escape(v));
  };
  facts("Tested backend", r.facts_got);
  facts("Reference", r.facts_ref);
  facts("Audit", r.audit);
  return s;
}

std::string report_html(const VerifyReport& r) {
  std::string s =
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>plumb verify</title><style>"
      "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
      "padding:2px 6px;font-size:12px}.fail{background:#fdd}.pass{background:#efe}</style></head><body>\n";
  s += fmt::format(
      "<h1>plumb verify: {}</h1>\n<p>model <code>{}</code> ({}); tested <code>{}</code> against "
      "<code>{}</code>; numerics {}; threshold cosine &gt;= {}; prompt {} tokens</p>\n",
      html_escape(verdict(r)), html_escape(r.model), html_escape(r.model_type), html_escape(r.backend),
      html_escape(r.against), html_escape(r.numerics), r.threshold, r.ids.size());
  for (const std::string& n : r.notes) s += "<p>Note: " + html_escape(n) + "</p>\n";
  s += "<h2>Per layer (worst tap of each)</h2>\n" + svg_chart(r);
  if (r.logits)
    s += fmt::format("<h2>Logits</h2><p>max |diff| {} / max |ref| {} = {}; argmax agrees at {}/{} positions</p>\n",
                     fmt_num(r.logits->max_abs), fmt_num(r.logits->max_ref), fmt_num(r.logits->rel()),
                     r.logits->argmax_agree, r.logits->positions);
  s += "<h2>Greedy tokens</h2><p>";
  if (!r.greedy_compared)
    s += "not compared (the reference is a dump)";
  else
    s += fmt::format("{} new tokens: {}<br>tested: {}<br>reference: {}", r.steps,
                     r.greedy_agree() ? "agree" : fmt::format("diverge at step {}", r.first_greedy_divergence()),
                     fmt::join(r.greedy_got, " "), fmt::join(r.greedy_ref, " "));
  s += "</p>\n<h2>Taps</h2>\n<table><tr><th>tap</th><th>shape</th><th>cosine</th><th>max abs diff</th><th>rel L2</th>"
       "<th>differing</th><th>result</th></tr>\n";
  for (const TapResult& t : r.taps)
    s += fmt::format(
        "<tr class=\"{}\"><td>{}</td><td>[{}]</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
        !t.compared ? ""
        : t.pass    ? "pass"
                    : "fail",
        html_escape(t.name), fmt::join(t.shape, ", "), fmt_num(t.m.cosine), fmt_num(t.m.max_abs), fmt_num(t.m.rel_l2),
        t.m.differing,
        !t.compared      ? "not compared: " + html_escape(t.note)
        : t.informational ? "info: " + html_escape(t.note)
        : t.pass          ? "pass"
                          : "FAIL");
  s += "</table>\n";
  auto facts = [&](const char* title, const Facts& f) {
    s += fmt::format("<h2>{}</h2><table>\n", title);
    for (const auto& [k, v] : f) s += fmt::format("<tr><td>{}</td><td>{}</td></tr>\n", html_escape(k), html_escape(v));
    s += "</table>\n";
  };
  facts("Tested backend", r.facts_got);
  facts("Reference", r.facts_ref);
  facts("Audit", r.audit);
  return s + "</body></html>\n";
}

void write_reports(const VerifyReport& r, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("{}: cannot create the report directory: {}", dir, ec.message());
  const std::pair<const char*, std::string> files[] = {
      {"verify.json", report_json(r)}, {"verify.md", report_markdown(r)}, {"verify.html", report_html(r)}};
  for (const auto& [name, text] : files) {
    const fs::path p = fs::path(dir) / name;
    std::ofstream f(p, std::ios::binary);
    f << text;
    if (!f) fail("{}: cannot write the report", p.string());
  }
}

}  // namespace plumb::verify
