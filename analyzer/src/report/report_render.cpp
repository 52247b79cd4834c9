// Format dispatch; kept apart so the renderers link without the analyzer's JSON writer.
#include "stepscope/analyzer/analysis_json.h"
#include "stepscope/analyzer/report.h"

namespace stepscope::analyzer {

std::string render_report(const Analysis& a, ReportFormat format) {
  switch (format) {
    case ReportFormat::Markdown: return render_markdown_report(a);
    case ReportFormat::Html: return render_html_report(a);
    case ReportFormat::Json: return to_json(a) + "\n";
    case ReportFormat::Metrics: return render_metrics_report(a);
    case ReportFormat::Text:
    default: return render_text_report(a);
  }
}

}  // namespace stepscope::analyzer
