// execute_plan: the streaming writer loop shared by every conversion.
#include "plumb/convert/plan.h"

#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <memory>

#include "plumb/format/output_dir.h"
#include "plumb/convert/source.h"
#include "plumb/format/json_util.h"
#include "plumb/util/error.h"
#include "plumb/util/mapped_file.h"
#include "plumb/util/progress.h"

namespace plumb::convert {
namespace {

namespace fs = std::filesystem;

void write_json(const fs::path& p, const nlohmann::ordered_json& j) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << j.dump(2) << "\n";
  f.close();
  if (!f) fail("{}: cannot write", p.string());
}

struct FileSpan {  // where each output file's tensors start and end in the execution order
  std::size_t first = SIZE_MAX, last = 0;
  std::vector<SafetensorsEntry> entries;
};

}  // namespace

fs::path source_dir(const std::string& src) {
  std::error_code ec;
  if (!fs::is_directory(src, ec))
    fail("{}: not a directory; convert reads a checkpoint directory (config.json + safetensors)", src);
  if (!fs::exists(fs::path(src) / "config.json", ec)) fail("{}: no config.json in the checkpoint directory", src);
  return fs::path(src);
}

nlohmann::ordered_json read_config_json(const fs::path& dir) {
  const fs::path p = dir / "config.json";
  MappedFile file(p.string());
  try {
    return nlohmann::ordered_json::parse(reinterpret_cast<const char*>(file.data()),
                                         reinterpret_cast<const char*>(file.data()) + file.size());
  } catch (const nlohmann::json::parse_error& e) {
    fail("{}: invalid JSON: {}", p.string(), e.what());
  }
}

void note_conversion(nlohmann::ordered_json& config, nlohmann::ordered_json step) {
  auto& log = config["plumb_conversion"];
  if (!log.is_array()) log = nlohmann::ordered_json::array();
  log.push_back(std::move(step));
}

Producer copy_of(const Checkpoint& ckpt, const TensorInfo& t) {
  return [&ckpt, &t](const TensorSink& sink) {
    const SourceTensor src(ckpt, t);
    src.for_each_piece(src.bytes(), kCopyPieceBytes, sink);
  };
}

ConvertReport execute_plan(const fs::path& src, const ConversionPlan& plan, const ConvertOutput& out) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<FileSpan> spans(plan.files.size());
  ConvertReport rep;
  uint64_t data_bytes = 0;
  for (std::size_t i = 0; i < plan.tensors.size(); ++i) {
    const auto& [f, t] = plan.tensors[i];
    spans[f].first = std::min(spans[f].first, i);
    spans[f].last = i;
    spans[f].entries.push_back(t.entry);
    data_bytes += t.entry.nbytes();
    rep.bytes_read += t.source_bytes;
    rep.converted += t.converted;
  }
  uint64_t header_bytes = 0;
  for (std::size_t f = 0; f < spans.size(); ++f)
    header_bytes += encode_safetensors_header(spans[f].entries, plan.files[f].metadata, plan.files[f].name).size();

  AtomicOutputDir dir(src, out.dst, out.force, data_bytes + header_bytes + side_files_bytes(src));
  InterruptGuard interrupts;
  Progress progress(plan.label, data_bytes, out.progress);
  std::vector<std::unique_ptr<SafetensorsStreamWriter>> writers(plan.files.size());
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < plan.tensors.size(); ++i) {
    const auto& [f, t] = plan.tensors[i];
    auto& w = writers[f];
    // Files are opened at their first tensor and finished after their last, so only the files
    // being interleaved (tensor-parallel ranks) hold a buffer at the same time.
    if (i == spans[f].first)
      w = std::make_unique<SafetensorsStreamWriter>((dir.tmp() / plan.files[f].name).string(), spans[f].entries,
                                                    plan.files[f].metadata);
    w->begin_tensor(t.entry.name);
    t.produce([&](std::span<const std::byte> bytes) {
      InterruptGuard::check();
      w->write(bytes);
      progress.advance(bytes.size());
    });
    weight_map[t.entry.name] = plan.files[f].name;
    progress.set_items(i + 1, plan.tensors.size(), "tensors");
    if (i == spans[f].last) {
      w->finish();
      rep.bytes_written += w->file_size();
      w.reset();
      ++rep.files;
    }
  }
  progress.finish();
  if (plan.write_index) {
    nlohmann::ordered_json index;
    index["metadata"]["total_size"] = data_bytes;
    index["weight_map"] = std::move(weight_map);
    write_json(dir.tmp() / Checkpoint::kIndexName, index);
  }
  write_json(dir.tmp() / "config.json", plan.config);
  copy_side_files(src, dir.tmp());
  InterruptGuard::check();
  dir.commit();

  rep.dst = out.dst;
  rep.tensors = static_cast<int64_t>(plan.tensors.size());
  rep.dropped = plan.dropped;
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rep.peak_rss_bytes = peak_rss_bytes();
  return rep;
}

std::string report_text(const ConvertReport& r) {
  return fmt::format(
      "wrote {}: {} file(s), {} tensors ({} converted, {} dropped)\n"
      "read {}, wrote {} in {:.1f} s ({}/s)\n"
      "peak RSS {}\n",
      r.dst, r.files, r.tensors, r.converted, r.dropped, format_bytes(static_cast<double>(r.bytes_read)),
      format_bytes(static_cast<double>(r.bytes_written)), r.seconds,
      format_bytes(r.seconds > 0 ? r.bytes_written / r.seconds : 0.0),
      format_bytes(static_cast<double>(r.peak_rss_bytes)));
}

}  // namespace plumb::convert
