// A flame graph of the CPU samples as one self-contained SVG: no script, no web font, a <title> per frame for
// the tooltip. Laid out as flamegraph.pl's default: the root at the bottom, callees above their callers, each
// frame as wide as its samples, siblings in name order.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "export/sample_stacks.h"
#include "stepscope/analyzer/export.h"
#include "stepscope/store/store.h"

namespace stepscope::analyzer {

using namespace stepscope::store;

namespace {

constexpr double kSvgWidth = 1200, kSvgMargin = 10, kFrameHeight = 16, kTitleHeight = 36;
constexpr double kCharWidth = 7.2;  // 12 px monospace
// px: narrower frames (and what they called) are left out. flamegraph.pl keeps frames from 0.1 px because its
// SVG zooms (a script); this one has none, so a frame under a pixel can be neither seen nor pointed at: a
// 30-step PyTorch CPU run (4,657 samples) drew 140,990 frames, 21.5 MB, at 0.1 px, and 16,121 (2.5 MB) at 1
// px.
constexpr double kNarrowestFrame = 1.0;

struct FlameNode {
  std::string name;
  int64_t samples = 0;
  std::map<std::string, size_t> children;  // name → index into the node list; name order is drawing order
};

std::string svg_escaped(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c < 0x20 ? ' ' : char(c);  // control characters are not XML
    }
  }
  return out;
}

// flamegraph.pl's "hot" palette, keyed by the name so that a frame keeps its colour from one export to the
// next.
std::string frame_fill(const std::string& name, int depth) {
  if (depth < 3) return "rgb(200,200,200)";  // all, process, thread
  if (name == "[off CPU]") return "rgb(110,150,220)";
  if (name == "[stepscope hook]") return "rgb(170,170,170)";
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return fmt::format("rgb({},{},{})", 205 + h % 50, (h >> 8) % 230, (h >> 16) % 55);
}

}  // namespace

std::string to_flame_graph_svg(const Trace& t, const std::string& title) {
  const SampleStacks st = sample_stacks(t);
  std::vector<FlameNode> nodes(1);
  nodes[0].name = "all";
  auto child = [&](size_t parent, const std::string& name) {
    auto it = nodes[parent].children.find(name);
    if (it != nodes[parent].children.end()) return it->second;
    nodes.push_back({name, 0, {}});
    nodes[parent].children.emplace(name, nodes.size() - 1);
    return nodes.size() - 1;
  };
  for (const auto& th : st.threads) {
    std::map<int32_t, int64_t> per_stack;
    for (const auto& s : th.samples) per_stack[s.stack] += s.weight;
    for (const auto& [stack, n] : per_stack) {
      size_t node = 0;
      nodes[node].samples += n;
      for (const std::string* name : {&th.process, &th.thread}) nodes[node = child(node, *name)].samples += n;
      for (int32_t f : st.stacks[stack]) nodes[node = child(node, st.frames[f])].samples += n;
    }
  }

  const double total = double(std::max<int64_t>(nodes[0].samples, 1));
  const double px_per_sample = (kSvgWidth - 2 * kSvgMargin) / total;
  struct Placed {
    size_t node;
    int depth;
    double x;
  };
  std::vector<Placed> placed;
  int max_depth = 0;
  for (std::vector<Placed> todo{{0, 0, kSvgMargin}}; !todo.empty();) {
    Placed p = todo.back();
    todo.pop_back();
    if (double(nodes[p.node].samples) * px_per_sample < kNarrowestFrame) continue;
    placed.push_back(p);
    max_depth = std::max(max_depth, p.depth);
    double x = p.x;
    for (const auto& [name, c] : nodes[p.node].children) {
      todo.push_back({c, p.depth + 1, x});
      x += double(nodes[c].samples) * px_per_sample;
    }
  }

  const double height = kTitleHeight + (max_depth + 1) * kFrameHeight + kSvgMargin;
  std::string out = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"monospace\" font-size=\"12\">\n"
      "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"rgb(248,248,242)\" "
      "class=\"background\"/>\n"
      "<text x=\"{2}\" y=\"18\" font-size=\"14\">{3}</text>\n"
      "<text x=\"{2}\" y=\"32\" fill=\"rgb(90,90,90)\">{4} samples; width: samples, the root at the bottom, "
      "callees above their callers; hover a frame for its count{5}</text>\n",
      kSvgWidth, height, kSvgMargin, svg_escaped(title), nodes[0].samples,
      placed.size() < nodes.size()
          ? fmt::format("; {} of {} frames, under a pixel wide, left out (--format speedscope keeps them)",
                        nodes.size() - placed.size(), nodes.size())
          : std::string());
  // Document order: the root first, each frame after its caller.
  std::sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) {
    return a.depth != b.depth ? a.depth < b.depth : a.x < b.x;
  });
  for (const auto& p : placed) {
    const FlameNode& n = nodes[p.node];
    const double w = double(n.samples) * px_per_sample;
    const double y = height - kSvgMargin - (p.depth + 1) * kFrameHeight;
    std::string label;
    const size_t fits = size_t(std::max(0.0, (w - 6) / kCharWidth));
    if (fits >= 3 && n.name.size() <= fits) {
      label = n.name;
    } else if (fits >= 3) {
      size_t cut = fits - 2;
      while (cut > 0 && (static_cast<unsigned char>(n.name[cut]) & 0xC0) == 0x80) --cut;  // not inside "…"
      label = n.name.substr(0, cut) + "..";
    }
    out += fmt::format(
        "<g><title>{} ({} samples, {:.2f}%)</title><rect x=\"{:.2f}\" y=\"{:.0f}\" width=\"{:.2f}\" "
        "height=\"{:.0f}\" "
        "fill=\"{}\" rx=\"2\"/>",
        svg_escaped(n.name), n.samples, 100.0 * double(n.samples) / total, p.x, y, w, kFrameHeight - 1,
        frame_fill(n.name, p.depth));
    if (!label.empty())
      out += fmt::format("<text x=\"{:.2f}\" y=\"{:.0f}\">{}</text>", p.x + 3, y + 11.5, svg_escaped(label));
    out += "</g>\n";
  }
  out += "</svg>\n";
  return out;
}

void export_flame_graph_svg(const Trace& t, const std::string& path, const std::string& title) {
  store::write_file_atomically(path, to_flame_graph_svg(t, title));
}

}  // namespace stepscope::analyzer
