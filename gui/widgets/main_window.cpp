#include "main_window.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QScrollArea>
#include <QSettings>
#include <QSortFilterProxyModel>
#include <QStatusBar>
#include <QTableView>
#include <QTextBrowser>
#include <QTextOption>
#include <QToolBar>
#include <QTreeView>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrent>

#include <cstring>
#include <string_view>

#include "event_details.h"
#include "flame_graph.h"
#include "stepscope/analyzer/step_outliers.h"
#include "stepscope/gui/timeline_layout.h"
#include "timeline_view.h"

namespace stepscope::gui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("stepscope");
  setAcceptDrops(true);
  loader_ = new TraceLoader(this);
  range_watcher_ = new QFutureWatcher<std::shared_ptr<RangeResult>>(this);
  connect(range_watcher_, &QFutureWatcherBase::finished, this, [this] { apply_range(range_watcher_->result()); });
  build_ui();
  connect(loader_, &TraceLoader::progress, this, [this](int permille, const QString& stage) {
    progress_->setVisible(true);
    progress_->setValue(permille);
    status_->setText(stage);
  });
  connect(loader_, &TraceLoader::loaded, this, &MainWindow::on_loaded);
  QSettings settings;
  restoreGeometry(settings.value("window/geometry").toByteArray());
  restoreState(settings.value("window/state").toByteArray());
  LayoutState tracks;
  for (const QString& g : settings.value("timeline/collapsed").toStringList()) tracks.collapsed.insert(g.toStdString());
  for (const QString& g : settings.value("timeline/expanded_others").toStringList())
    tracks.expanded_others.insert(g.toStdString());
  for (const QString& g : settings.value("timeline/open_graphs").toStringList()) tracks.open_graphs.insert(g.toStdString());
  timeline_->set_layout_state(std::move(tracks));
}

MainWindow::~MainWindow() { range_watcher_->waitForFinished(); }

void MainWindow::build_ui() {
  timeline_ = new TimelineView(this);
  setCentralWidget(timeline_);
  resize(1400, 900);

  // Menus and tool bar.
  auto* file = menuBar()->addMenu(tr("&File"));
  QAction* open = file->addAction(tr("&Open…"), this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open trace"), {},
                                                      tr("Traces (*.db *.stepscope *.json *.json.gz *.json.zst *.sqlite *.sqlite.gz);;All files (*)"));
    if (!path.isEmpty()) open_file(path);
  });
  open->setShortcut(QKeySequence::Open);
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);
  auto* view = menuBar()->addMenu(tr("&View"));
  QAction* all = view->addAction(tr("Zoom to &all"), this, [this] { timeline_->zoom_to_all(); });
  all->setShortcut(QKeySequence(Qt::Key_0));
  all->setShortcutContext(Qt::WidgetWithChildrenShortcut);
  QAction* steps = view->addAction(tr("Zoom to s&teps, start-up left out"), this, [this] { timeline_->zoom_to_steps(); });
  steps->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_0));
  QAction* sel = view->addAction(tr("Zoom to &selection (F)"), this, [this] { timeline_->zoom_to_selection(); });
  // CUDA graph replays are one block each; these show (or fold away) the kernels of every replay under its block.
  view->addAction(tr("Open every CUDA &graph replay"), this, [this] { timeline_->set_all_graphs_open(true); })
      ->setObjectName("openGraphs");
  view->addAction(tr("Close every CUDA graph replay"), this, [this] { timeline_->set_all_graphs_open(false); })
      ->setObjectName("closeGraphs");
  // The collector's own threads (its drain thread, CUPTI's buffer thread) are hidden from the call tree and the
  // flame graph unless asked for: they are the profiler's cost, not the program's.
  QAction* own = view->addAction(tr("Show stepscope's own &threads in call trees"));
  own->setObjectName("showCollectorThreads");
  own->setCheckable(true);
  connect(own, &QAction::toggled, this, [this](bool on) {
    show_collector_threads_ = on;
    if (range_result_)
      on_range(range_result_->t0, range_result_->t1, range_result_->selected, range_result_->caption);
  });

  auto* tb = addToolBar(tr("Timeline"));
  tb->setObjectName("toolbar");
  tb->addAction(open);
  tb->addAction(all);
  tb->addAction(steps);
  tb->addAction(sel);
  tb->addSeparator();
  search_ = new QLineEdit(this);
  search_->setPlaceholderText(tr("Search event names…"));
  search_->setClearButtonEnabled(true);
  search_->setMaximumWidth(320);
  tb->addWidget(search_);
  search_count_ = new QLabel(this);
  tb->addWidget(search_count_);
  connect(search_, &QLineEdit::textChanged, this, [this](const QString& text) {
    const size_t n = timeline_->set_search(text);
    search_count_->setText(text.isEmpty() ? QString() : tr(" %n match(es) ", nullptr, int(std::min<size_t>(n, INT32_MAX))));
  });
  connect(search_, &QLineEdit::returnPressed, this, [this] {
    timeline_->next_match(QApplication::keyboardModifiers() & Qt::ShiftModifier);
  });
  view->addSeparator();

  auto dock = [&](const QString& title, const char* name, QWidget* w, Qt::DockWidgetArea area) {
    auto* d = new QDockWidget(title, this);
    d->setObjectName(name);
    d->setWidget(w);
    addDockWidget(area, d);
    view->addAction(d->toggleViewAction());
    return d;
  };

  // Findings.
  findings_ = new FindingsModel(this);
  findings_proxy_ = new QSortFilterProxyModel(this);
  findings_proxy_->setSourceModel(findings_);
  findings_proxy_->setSortRole(SortRole);
  findings_view_ = new QTableView(this);
  findings_view_->setModel(findings_proxy_);
  findings_view_->setSelectionBehavior(QAbstractItemView::SelectRows);
  findings_view_->setSelectionMode(QAbstractItemView::SingleSelection);
  findings_view_->setSortingEnabled(true);
  findings_view_->sortByColumn(FindingsModel::Severity, Qt::DescendingOrder);  // the worst first
  findings_view_->verticalHeader()->hide();
  findings_view_->horizontalHeader()->setStretchLastSection(true);
  connect(findings_view_, &QAbstractItemView::clicked, this,
          [this](const QModelIndex& i) { select_finding(findings_proxy_->mapToSource(i).row()); });
  connect(findings_view_, &QAbstractItemView::activated, this,
          [this](const QModelIndex& i) { select_finding(findings_proxy_->mapToSource(i).row()); });
  QDockWidget* findings_dock = dock(tr("Findings"), "findings", findings_view_, Qt::BottomDockWidgetArea);

  // Details.
  details_ = new QTextBrowser(this);
  details_->setOpenExternalLinks(false);
  details_->setOpenLinks(false);
  // Qt's default also breaks inside a word when a cell is narrow ("coun t", "cuda DeviceSy nchr onize"):
  // words stay whole and a wide table scrolls sideways.
  details_->setWordWrapMode(QTextOption::WordWrap);
  // A kernel or call name in the evidence highlights its occurrences (the search box does the highlighting).
  connect(details_, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
    const QString s = url.toString(QUrl::FullyEncoded);
    if (s.startsWith(kHighlightScheme))
      search_->setText(QUrl::fromPercentEncoding(s.mid(int(std::strlen(kHighlightScheme))).toUtf8()));
  });
  dock(tr("Details"), "details", details_, Qt::RightDockWidgetArea);

  // Call tree with its direction switch.
  auto* tree_box = new QWidget(this);
  auto* tree_layout = new QVBoxLayout(tree_box);
  tree_layout->setContentsMargins(0, 0, 0, 0);
  tree_direction_ = new QComboBox(tree_box);
  tree_direction_->addItems({tr("Top-down"), tr("Bottom-up")});
  range_label_ = new QLabel(tree_box);
  range_label_->setObjectName("rangeLabel");
  auto* tree_head = new QHBoxLayout();
  tree_head->addWidget(tree_direction_);
  tree_head->addWidget(range_label_, 1);
  tree_layout->addLayout(tree_head);
  call_tree_ = new CallTreeModel(this);
  tree_view_ = new QTreeView(tree_box);
  tree_view_->setModel(call_tree_);
  tree_view_->setUniformRowHeights(true);
  tree_view_->setSortingEnabled(true);  // by self time: where a function itself spends, whoever called it
  tree_view_->sortByColumn(CallTreeModel::Total, Qt::DescendingOrder);
  tree_view_->header()->setStretchLastSection(false);
  tree_view_->header()->setSectionResizeMode(0, QHeaderView::Stretch);
  tree_layout->addWidget(tree_view_);
  connect(tree_direction_, &QComboBox::currentIndexChanged, this, [this] { update_call_tree_direction(); });
  QDockWidget* tree_dock = dock(tr("Call tree"), "calltree", tree_box, Qt::BottomDockWidgetArea);

  // Deep stacks make the graph taller than any screen: it scrolls inside its dock instead of growing the window.
  flame_ = new FlameGraphWidget(this);
  auto* flame_scroll = new QScrollArea(this);
  flame_scroll->setWidgetResizable(true);
  flame_scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  flame_scroll->setFrameShape(QFrame::NoFrame);
  flame_scroll->setWidget(flame_);
  QDockWidget* flame_dock = dock(tr("Flame graph"), "flamegraph", flame_scroll, Qt::BottomDockWidgetArea);

  // Kernel statistics, sortable and filterable.
  auto* kbox = new QWidget(this);
  auto* klayout = new QVBoxLayout(kbox);
  klayout->setContentsMargins(0, 0, 0, 0);
  kernels_filter_ = new QLineEdit(kbox);
  kernels_filter_->setPlaceholderText(tr("Filter kernels…"));
  kernels_filter_->setClearButtonEnabled(true);
  klayout->addWidget(kernels_filter_);
  kernels_note_ = new QLabel(kbox);
  kernels_note_->setWordWrap(true);
  kernels_note_->hide();
  klayout->addWidget(kernels_note_);
  kernel_stats_ = new KernelStatsModel(this);
  kernels_proxy_ = new QSortFilterProxyModel(this);
  kernels_proxy_->setSourceModel(kernel_stats_);
  kernels_proxy_->setSortRole(SortRole);
  kernels_proxy_->setFilterCaseSensitivity(Qt::CaseInsensitive);
  kernels_proxy_->setFilterKeyColumn(KernelStatsModel::Name);
  kernels_view_ = new QTableView(kbox);
  kernels_view_->setModel(kernels_proxy_);
  kernels_view_->setSortingEnabled(true);
  kernels_view_->sortByColumn(KernelStatsModel::Total, Qt::DescendingOrder);
  kernels_view_->verticalHeader()->hide();
  kernels_view_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  kernels_view_->setSelectionBehavior(QAbstractItemView::SelectRows);
  klayout->addWidget(kernels_view_);
  connect(kernels_filter_, &QLineEdit::textChanged, kernels_proxy_, &QSortFilterProxyModel::setFilterFixedString);
  QDockWidget* kernels_dock = dock(tr("Kernels"), "kernels", kbox, Qt::BottomDockWidgetArea);

  // Steps: every step's duration and breakdown, sortable; slow ones flagged (▲) with what grew.
  steps_ = new StepsModel(this);
  steps_proxy_ = new QSortFilterProxyModel(this);
  steps_proxy_->setSourceModel(steps_);
  steps_proxy_->setSortRole(SortRole);
  steps_view_ = new QTableView(this);
  steps_view_->setModel(steps_proxy_);
  steps_view_->setSelectionBehavior(QAbstractItemView::SelectRows);
  steps_view_->setSelectionMode(QAbstractItemView::SingleSelection);
  steps_view_->setSortingEnabled(true);
  steps_view_->sortByColumn(StepsModel::Step, Qt::AscendingOrder);  // in run order until the user sorts
  steps_view_->verticalHeader()->hide();
  steps_view_->horizontalHeader()->setStretchLastSection(true);
  connect(steps_view_, &QAbstractItemView::clicked, this,
          [this](const QModelIndex& i) { select_step(steps_proxy_->mapToSource(i).row()); });
  connect(steps_view_, &QAbstractItemView::activated, this,
          [this](const QModelIndex& i) { select_step(steps_proxy_->mapToSource(i).row()); });
  QDockWidget* steps_dock = dock(tr("Steps"), "steps", steps_view_, Qt::BottomDockWidgetArea);
  tabifyDockWidget(findings_dock, steps_dock);
  tabifyDockWidget(steps_dock, tree_dock);
  tabifyDockWidget(tree_dock, flame_dock);
  tabifyDockWidget(flame_dock, kernels_dock);
  findings_dock->raise();
  // The timeline leads: the bottom panels start at under a third of the window (a saved layout replaces this).
  resizeDocks({findings_dock}, {height() * 3 / 10}, Qt::Vertical);

  // Status bar.
  status_ = new QLabel(this);
  progress_ = new QProgressBar(this);
  progress_->setRange(0, 1000);
  progress_->setMaximumWidth(240);
  progress_->setVisible(false);
  analysis_note_ = new QLabel(this);
  analysis_note_->setVisible(false);
  statusBar()->addWidget(status_, 1);
  statusBar()->addPermanentWidget(analysis_note_);
  statusBar()->addPermanentWidget(progress_);

  connect(timeline_, &TimelineView::event_selected, this, &MainWindow::on_event_selected);
  connect(timeline_, &TimelineView::sample_selected, this, [this](quint32 row) {
    if (model_ && row < model_->trace().samples.size()) details_->setHtml(sample_details_html(*model_, row));
  });
  connect(timeline_, &TimelineView::time_range_selected, this, [this](qint64 t0, qint64 t1) { on_range(t0, t1); });
}

QString MainWindow::status_text() const {
  return status_->text();
}

QString MainWindow::analysis_note() const {
  return analysis_note_->text();
}

void MainWindow::set_synchronous(bool on) {
  synchronous_ = on;
  timeline_->set_synchronous(on);
}

void MainWindow::open_file(const QString& path) {
  status_->setText(tr("Loading %1…").arg(path));
  not_analyzed_.clear();
  analysis_note_->clear();
  analysis_note_->setToolTip({});
  analysis_note_->setVisible(false);
  progress_->setValue(0);
  progress_->setVisible(true);
  loader_->load(path);
}

void MainWindow::on_loaded(const LoadResult& r) {
  progress_->setVisible(false);
  load_error_ = r.model ? QString() : r.error;
  if (!r.model) {
    status_->setText(r.error);
    if (!synchronous_) QMessageBox::warning(this, tr("Cannot open"), r.error);
    emit model_loaded(false);
    return;
  }
  not_analyzed_ = r.not_analyzed;
  analysis_note_->setText(not_analyzed_.isEmpty() ? QString() : tr("Not analysed"));
  analysis_note_->setToolTip(not_analyzed_);
  analysis_note_->setVisible(!not_analyzed_.isEmpty());
  set_model(r.model, QFileInfo(r.path).fileName());
  // What the user must know first (which file of a folder is shown, what the opening view leaves out), then
  // the load's facts: the status line is one line, and its end is cut where the window is narrow (the tooltip
  // holds it whole).
  QStringList lead;
  const auto& meta = r.model->trace().meta;
  // A directory that is not one job's ranks (flight saves of one process, unrelated programs): its first
  // input alone, and why; File ▸ Open shows the others.
  if (auto it = meta.find("ranks.not_one_job"); it != meta.end()) {
    const auto shown = meta.find("source_file");
    lead << tr("Showing %1 on its own (File ▸ Open for the others): not the ranks of one job: %2")
                .arg(QString::fromStdString(shown == meta.end() ? std::string() : shown->second),
                     QString::fromStdString(it->second));
  }
  // A directory of ranks: what `analyze` leaves out (a launcher's store) is left out here too, and said.
  if (auto it = meta.find("ranks.left_out"); it != meta.end())
    lead << tr("left out: %1").arg(QString::fromStdString(it->second));
  if (auto ext = r.model->steady_extent(); ext && ext->first - r.model->begin() > (r.model->end() - r.model->begin()) / 20) {
    int first = -1;
    for (const auto& s : r.model->steps())
      if (!s.warmup) {
        first = int(s.index);
        break;
      }
    lead << tr("opened on the steps from step %1, after %2 of start-up (0 or Home shows everything)")
                .arg(first)
                .arg(QString::fromStdString(format_duration(double(ext->first - r.model->begin()))));
  }
  // Where the steps came from when nothing marked them, whatever the details pane shows (a selected finding
  // hid it: a periodic trace never said its steps were inferred).
  if (const auto* a = r.model->analysis())
    for (const auto& note :
         {analyzer::malformed_events_note(a->summary), analyzer::step_source_note(a->summary)})
      if (!note.empty()) lead << QString::fromStdString(note);
  QString facts;
  if (r.not_analyzed.isEmpty())
    facts = tr("%1: %2 events, %3 tracks — loaded in %4 s, analyzed in %5 s, timeline built in %6 s")
                .arg(r.path)
                .arg(r.model->event_count())
                .arg(r.model->tracks().size())
                .arg(r.load_s, 0, 'f', 2)
                .arg(r.analyze_s, 0, 'f', 2)
                .arg(r.build_s, 0, 'f', 2);
  else
    facts = tr("%1: %2 events, %3 tracks — timeline read in %4 s — %5 (why: the note at the right)")
                .arg(r.path)
                .arg(r.model->event_count())
                .arg(r.model->tracks().size())
                .arg(r.build_s, 0, 'f', 2)
                .arg(r.over_budget ? not_analyzed_brief(*r.over_budget) : r.not_analyzed);
  if (r.ranks) facts += tr(", ranks compared in %1 s").arg(r.ranks_s, 0, 'f', 2);
  if (r.model->event_count() == 0) lead.prepend(tr("%1 holds no events").arg(QFileInfo(r.path).fileName()));
  lead << facts;
  loaded_status_ = lead.join(QStringLiteral(" — "));
  loaded_status_tip_ = lead.join(QStringLiteral("\n"));
  status_->setText(loaded_status_);
  status_->setToolTip(loaded_status_tip_);
  emit model_loaded(true);
}

void MainWindow::set_model(std::shared_ptr<const TimelineModel> model, const QString& title) {
  range_watcher_->waitForFinished();
  model_ = std::move(model);
  timeline_->set_model(model_);
  findings_->set_model(model_);
  findings_view_->resizeColumnsToContents();
  steps_->set_model(model_);
  steps_view_->resizeColumnsToContents();
  details_->clear();
  if (!title.isEmpty()) setWindowTitle(title + " — stepscope");
  if (!model_) return;
  show_default_range();
  // Open on the answer: the steps after start-up framed (0 or Home shows everything), the worst finding selected
  // and its steps shaded.
  timeline_->zoom_to_steps();
  if (const int worst = model_->worst_finding(); worst >= 0) select_finding(worst, false);
  else
    details_->setHtml(run_notes_html(*model_) +  // what `analyze` says of such a run, not an empty pane
                      (not_analyzed_.isEmpty() ? QString() : "<p>" + not_analyzed_.toHtmlEscaped() + "</p>"));
  // Without GPU activity the GPU categories are all zero: show the wait for input and the own work only.
  const auto& cats = analyzer::step_categories();
  for (size_t c = 0; c < cats.size(); ++c) {
    const std::string_view key = cats[c].key;
    steps_view_->setColumnHidden(StepsModel::FirstCategory + int(c),
                                 !steps_->has_gpu() && key != "data_wait" && key != "host_idle");
  }
}

void MainWindow::select_finding(int row, bool zoom) {
  if (!model_ || row < 0 || static_cast<size_t>(row) >= model_->findings().size()) return;
  findings_view_->selectRow(findings_proxy_->mapFromSource(findings_->index(row, 0)).row());
  const FindingInfo& f = model_->findings()[row];
  std::vector<std::pair<int64_t, int64_t>> bands;
  // A cross-rank finding's steps are aligned step indexes, already in `ranges` across every rank.
  for (int64_t s : f.cross_rank ? std::vector<int64_t>() : f.steps)
    if (int p = model_->step_position(s); p >= 0) bands.emplace_back(model_->steps()[p].start, model_->steps()[p].end);
  for (const auto& r : f.ranges) bands.push_back(r);
  timeline_->set_highlights(bands);
  if (auto ext = model_->finding_extent(row); ext && zoom) timeline_->zoom_to(double(ext->first), double(ext->second));
  timeline_->select_event(EventRef{EventKind::Finding, static_cast<uint32_t>(row)});
  details_->setHtml(finding_details_html(*model_, row));
}

void MainWindow::show_steps() {
  if (auto* d = qobject_cast<QDockWidget*>(steps_view_->parentWidget())) d->raise();
}

void MainWindow::select_step(int row) {
  const int pos = steps_->step_position(row);
  if (!model_ || pos < 0) return;
  const StepInfo& st = model_->steps()[pos];
  show_steps();
  steps_view_->selectRow(steps_proxy_->mapFromSource(steps_->index(row, 0)).row());
  timeline_->set_highlights({{st.start, st.end}});
  timeline_->zoom_to(double(st.start), double(st.end));
  timeline_->select_event(EventRef{EventKind::Step, static_cast<uint32_t>(pos)});
}

void MainWindow::show_default_range() {
  if (!model_) return;
  // The call tree, flame graph and kernels of the steps the timeline opens on: over the whole run, a PyTorch
  // recording's tree was two thirds imports.
  int64_t first = -1, last = -1;
  for (const auto& s : model_->steps())
    if (!s.warmup) {
      if (first < 0) first = s.index;
      last = s.index;
    }
  const auto ext = model_->steady_extent();
  if (ext && first >= 0)  // the extent of GPU steps alone, every host step a warm-up: no steps to name
    on_range(ext->first, ext->second, false,
             tr("Steps %1–%2, after start-up: %3 (select a range on the timeline for another)")
                 .arg(first)
                 .arg(last)
                 .arg(QString::fromStdString(format_duration(double(ext->second - ext->first)))));
  else
    on_range(model_->begin(), model_->end(), false);
}

void MainWindow::clear_selection() {
  if (!model_) return;
  if (range_result_ && range_result_->selected) show_default_range();  // Esc also ends the time selection
  findings_view_->clearSelection();
  steps_view_->clearSelection();
  timeline_->set_highlights({});
  details_->setHtml(run_notes_html(*model_) +
                    (not_analyzed_.isEmpty() ? QString() : "<p>" + not_analyzed_.toHtmlEscaped() + "</p>"));
  status_->setText(loaded_status_);
  status_->setToolTip(loaded_status_tip_);
}

void MainWindow::on_event_selected(std::optional<EventRef> e) {
  if (!model_) return;
  if (!e) {
    // Esc or a click on nothing: the finding's row, its shading and its details went stale otherwise.
    clear_selection();
    return;
  }
  if (e->kind == EventKind::Finding) return;  // select_finding fills the panel
  if (e->kind == EventKind::Step) {
    // A step clicked on the timeline is the step selected: its row, its shading (the finding's went on
    // showing).
    findings_view_->clearSelection();
    for (int r = 0; r < steps_->rowCount(); ++r)
      if (steps_->step_position(r) == int(e->row)) {
        steps_view_->selectRow(steps_proxy_->mapFromSource(steps_->index(r, 0)).row());
        break;
      }
    timeline_->set_highlights({{model_->steps()[e->row].start, model_->steps()[e->row].end}});
  }
  details_->setHtml(event_details_html(*model_, *e));
}

void MainWindow::on_range(int64_t t0, int64_t t1, bool selected, const QString& caption) {
  if (!model_) return;
  QString label = caption;
  if (label.isEmpty() && t0 <= model_->begin() && t1 >= model_->end())
    label = tr("The whole run: %1").arg(QString::fromStdString(format_duration(double(t1 - t0))));
  else if (label.isEmpty())
    label = tr("Selection: %1 from %2")
                .arg(QString::fromStdString(format_duration(double(t1 - t0))),
                     QString::fromStdString(format_duration(double(t0 - model_->begin()))));
  range_label_->setText(label);
  auto model = model_;
  const bool own = show_collector_threads_;
  auto work = [model, t0, t1, selected, own, label]() {
    auto r = std::make_shared<RangeResult>();
    r->t0 = t0;
    r->t1 = t1;
    r->caption = label;
    r->top_down = CallTree::for_range(*model, t0, t1, CallTree::Direction::TopDown, own);
    r->bottom_up = r->top_down.inverted();
    r->stats = kernel_stats(*model, t0, t1);
    r->breakdown = range_breakdown(*model, t0, t1);
    r->selected = selected;
    return r;
  };
  if (synchronous_) {
    apply_range(work());
    return;
  }
  range_watcher_->waitForFinished();  // the previous range's summary is short-lived work
  range_watcher_->setFuture(QtConcurrent::run(work));
}

void MainWindow::apply_range(std::shared_ptr<RangeResult> r) {
  if (!r) return;
  range_result_ = r;
  kernel_stats_->set_stats(r->stats);
  // The range's breakdown on the status line; a selected range's also in the details, with what ran in it.
  const RangeBreakdown& b = r->breakdown;
  const double span = double(std::max<int64_t>(1, r->t1 - r->t0));
  auto pct = [&](int64_t ns) { return QString::number(100.0 * double(ns) / span, 'f', 1) + " %"; };
  QString line = tr("%1 from %2")
                     .arg(QString::fromStdString(format_duration(double(r->t1 - r->t0))),
                          QString::fromStdString(format_duration(double(r->t0 - model_->begin()))));
  if (steps_->has_gpu()) line += tr(" · GPU busy %1").arg(pct(b.gpu_busy_ns));
  for (const auto& [label, ns] : b.idle)
    if (ns > 0) line += QString(" · %1 %2").arg(QString::fromStdString(label), pct(ns));
  range_label_->setText(r->caption);
  // An empty table says why: nothing ran on a GPU in the whole recording, or only elsewhere.
  const bool gpu_anywhere = std::any_of(model_->tracks().begin(), model_->tracks().end(),
                                        [](const Track& t) { return t.kind == TrackKind::GpuStream; });
  kernels_note_->setText(!r->stats.empty() ? QString()
                         : gpu_anywhere    ? tr("No GPU activity in this range (%1).").arg(r->caption)
                                        : tr("No GPU activity in this recording: it holds host data only."));
  kernels_note_->setVisible(r->stats.empty());
  if (r->selected) {
    status_->setText(tr("Selection: ") + line);
    details_->setHtml(range_details_html(*model_, b, r->stats, r->bottom_up));
  }
  flame_->set_tree(r->top_down);
  update_call_tree_direction();
}

void MainWindow::update_call_tree_direction() {
  if (!range_result_) return;
  const bool top_down = tree_direction_->currentIndex() == 0;
  call_tree_->set_tree(top_down ? range_result_->top_down : range_result_->bottom_up);
  if (!top_down) {
    tree_view_->expandToDepth(0);
    return;
  }
  // Opened along the hot path, as far as one child still holds a fifth of the time: three fixed levels showed
  // _start → __libc_start_main → libc.so.6+0x2a1c9 and no frame of the program.
  const auto& nodes = call_tree_->tree().nodes();
  const double root = nodes.empty() ? 0 : nodes[0].total;
  QModelIndex at;
  for (int depth = 0; depth < 256 && root > 0; ++depth) {
    const int32_t node = call_tree_->node_of(at);
    if (nodes[size_t(node)].children.empty()) break;
    // The child with the most time, whatever order the view shows.
    const auto& children = nodes[size_t(node)].children;
    const auto most = std::max_element(children.begin(), children.end(), [&](int32_t a, int32_t b) {
      return nodes[size_t(a)].total < nodes[size_t(b)].total;
    });
    const QModelIndex hottest = call_tree_->index(int(most - children.begin()), 0, at);
    if (!hottest.isValid() || nodes[size_t(*most)].total < 0.2 * root) break;
    tree_view_->expand(hottest);
    at = hottest;
  }
  if (at.isValid())
    tree_view_->scrollTo(at, QAbstractItemView::EnsureVisible);
  else
    tree_view_->expandToDepth(0);
}

void MainWindow::closeEvent(QCloseEvent* e) {
  QSettings settings;
  settings.setValue("window/geometry", saveGeometry());
  settings.setValue("window/state", saveState());
  QStringList collapsed, expanded;
  for (const auto& g : timeline_->layout_state().collapsed) collapsed << QString::fromStdString(g);
  for (const auto& g : timeline_->layout_state().expanded_others) expanded << QString::fromStdString(g);
  settings.setValue("timeline/collapsed", collapsed);
  settings.setValue("timeline/expanded_others", expanded);
  QStringList graphs;
  for (const auto& g : timeline_->layout_state().open_graphs) graphs << QString::fromStdString(g);
  settings.setValue("timeline/open_graphs", graphs);
  QMainWindow::closeEvent(e);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* e) {
  if (e->mimeData()->hasUrls()) e->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* e) {
  const auto urls = e->mimeData()->urls();
  if (!urls.isEmpty() && urls.first().isLocalFile()) open_file(urls.first().toLocalFile());
}

}  // namespace stepscope::gui
