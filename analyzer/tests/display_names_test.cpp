// Display names on real symbols: strings taken from stepscope's own H100 recordings
// (../shared/recordings/h100-2026-11-22, `sqlite3 X.db "select value from strings"`).
#include <catch2/catch.hpp>

#include <filesystem>

#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/load.h"
#include "test_support.h"

using namespace stepscope;
using analyzer::short_symbol;

TEST_CASE("short_symbol folds template arguments and parameter lists of real PyTorch symbols") {
  CHECK(short_symbol("void std::vector<unsigned long, std::allocator<unsigned long> >::_M_realloc_insert<unsigned "
                     "long>(__gnu_cxx::__normal_iterator<unsigned long*, std::vector<unsigned long, "
                     "std::allocator<unsigned long> > >, unsigned long&&)") ==
        "std::vector<…>::_M_realloc_insert<…>(…)");
  CHECK(short_symbol("at::autocast::(anonymous namespace)::TORCH_LIBRARY_IMPL_init_aten_Autocast_3(torch::Library&)") ==
        "at::autocast::TORCH_LIBRARY_IMPL_init_aten_Autocast_3(…)");
  CHECK(short_symbol("std::_Sp_counted_base<(__gnu_cxx::_Lock_policy)2>::_M_release()") ==
        "std::_Sp_counted_base<…>::_M_release()");
  CHECK(short_symbol("c10::Argument::cloneWithType(c10::Type::SingletonOrSharedTypePtr<c10::Type> const&) const") ==
        "c10::Argument::cloneWithType(…) const");
  CHECK(short_symbol("operator new(unsigned long)") == "operator new(…)");
  // Numeric template arguments tell kernel variants apart and stay; types are folded.
  CHECK(short_symbol("void op_kernel<29>(float*, float const*, int)") == "op_kernel<29>(…)");
  CHECK(short_symbol("void gemm_tile<128, 64, true>(float*)") == "gemm_tile<128, 64, true>(…)");
  CHECK(short_symbol("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float> >(float*)") ==
        "at::native::reduce_kernel<…>(…)");
  CHECK(short_symbol("c10::operator<<(std::ostream&, c10::Argument const&) [clone .isra.0]") == "c10::operator<<(…)");
  CHECK(short_symbol("c10::detail::infer_schema::(anonymous namespace)::createArgumentVector(c10::ArrayRef<c10::detail::"
                     "infer_schema::ArgumentDef>)") == "c10::detail::infer_schema::createArgumentVector(…)");
  // Kernel names are stored mangled by CUPTI: demangled, then folded.
  CHECK(short_symbol("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_13BinaryFunctorIfffZNS0_67_GLOBAL__N__06c19b41_"
                     "28_ActivationThresholdKernel_cu_751192d7_1581121threshold_kernel_implIfEEvRNS_18TensorIteratorBaseET_"
                     "S7_EUlffE_EESt5arrayIPcLm3EEEEviT0_T1_") ==
        "at::native::vectorized_elementwise_kernel<…>(…)");
  CHECK(analyzer::full_symbol("_ZN5cudnn19engines_precompiled16nchwToNhwcKernelIfffLb0ELb1EL21cudnnKernelDataType_t2EEEvNS0_"
                              "18nchw2nhwc_params_tIT1_EEPKT_PT0_")
            .rfind("void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true,", 0) == 0);
  // Not C++: unchanged.
  CHECK(short_symbol("sm80_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_"
                     "execute_kernel__5x_cublas") ==
        "sm80_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas");
  CHECK(short_symbol("_Py_hashtable_get") == "_Py_hashtable_get");
  CHECK(short_symbol("aten::conv2d") == "aten::conv2d");
  CHECK(short_symbol("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__") ==
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__");
}

TEST_CASE("a Python file shared by many packages is named by its path in its package, as py-spy does") {
  using analyzer::python_file_name;
  // A base name that says which file it is stays short.
  CHECK(python_file_name("/home/me/proj/train.py") == "train.py");
  CHECK(python_file_name("/usr/lib/python3/dist-packages/numpy/core/fromnumeric.py") == "fromnumeric.py");
  // A common one: the path below site-packages / dist-packages / the standard library's root.
  CHECK(python_file_name("/opt/venv/lib/python3.12/site-packages/torch/autograd/__init__.py") ==
        "torch/autograd/__init__.py");
  CHECK(python_file_name("/opt/venv/lib/python3.12/site-packages/torch/nn/modules/module.py") ==
        "torch/nn/modules/module.py");
  CHECK(python_file_name("/usr/lib/python3/dist-packages/numpy/__init__.py") == "numpy/__init__.py");
  CHECK(python_file_name("/usr/lib/python3.11/json/__init__.py") == "json/__init__.py");
  CHECK(python_file_name("/usr/local/lib/python3.11/site-packages/a/b/utils.py") == "a/b/utils.py");
  // Outside a package root: at least its folder.
  CHECK(python_file_name("/home/me/proj/utils.py") == "proj/utils.py");
  CHECK(python_file_name("proj/__init__.py") == "proj/__init__.py");
  CHECK(python_file_name("__main__.py") == "__main__.py");
  CHECK(python_file_name("<frozen runpy>") == "<frozen runpy>");
  CHECK(analyzer::python_frame_name("backward", "/x/site-packages/torch/autograd/__init__.py", 395) ==
        "backward (torch/autograd/__init__.py:395)");
  CHECK(analyzer::python_frame_name("<module>", "/home/me/proj/__main__.py", 0) ==
        "<module> (proj/__main__.py)");
}

TEST_CASE("Python frames and unsymbolized addresses") {
  CHECK(analyzer::python_frame_name("_find_and_load", "<frozen importlib._bootstrap>", 1360) ==
        "_find_and_load (<frozen importlib._bootstrap>:1360)");
  CHECK(analyzer::python_frame_name("__next__", "/opt/torch/.venv/lib/python3.12/site-packages/torch/utils/data/dataloader.py", 733) ==
        "__next__ (dataloader.py:733)");
  CHECK(analyzer::address_frame_name("/lib/x86_64-linux-gnu/libc.so.6", 0xab658) == "libc.so.6+0xab658");
  CHECK(analyzer::address_frame_name("", 16) == "??+0x10");
}

TEST_CASE("every symbol of an H100 recording folds to a short, balanced name") {
  const std::string xz = test::traces_dir() + "/../recordings/h100-2026-11-22/torch_dataloader.db.xz";
  if (!std::filesystem::exists(xz)) {
    WARN("SKIPPED: no H100 recordings at " << xz);
    return;
  }
  const auto dir = std::filesystem::path(test::binary_dir()) / "test-scratch" / "display_names";
  std::filesystem::create_directories(dir);
  const std::string db = (dir / "torch_dataloader.db").string();
  REQUIRE(test::run_shell("xz -dc " + test::shell_quote(xz) + " > " + test::shell_quote(db)).status == 0);
  const store::Trace t = analyzer::load_trace(db);
  size_t cpp = 0, long_ones = 0;
  for (const auto& f : t.frames) {
    if (f.kind != store::FrameKind::Native || !f.symbol) continue;
    const std::string full = t.str(f.symbol), shown = analyzer::frame_display_name(t, f);
    if (full.find("::") == std::string::npos) continue;
    ++cpp;
    INFO(full);
    CHECK(shown.size() <= full.size());
    CHECK(shown.find("(anonymous namespace)") == std::string::npos);
    std::string brackets = shown;  // an operator's own < or > is not a bracket
    for (const char* op : {"operator<<", "operator>>", "operator<", "operator>", "operator->"})
      for (size_t p; (p = brackets.find(op)) != std::string::npos;) brackets.erase(p, std::string(op).size());
    CHECK(std::count(brackets.begin(), brackets.end(), '<') == std::count(brackets.begin(), brackets.end(), '>'));
    CHECK(shown.find("[clone") == std::string::npos);
    long_ones += shown.size() > 120;
  }
  CHECK(cpp > 1000);
  CHECK(long_ones * 100 < cpp);  // under 1% still long (deep namespaces, lambdas)
}

TEST_CASE("byte counts in binary units, three figures, the next unit before an exponent") {
  CHECK(analyzer::byte_count_name(512) == "512 B");
  CHECK(analyzer::byte_count_name(1536) == "1.5 KiB");
  CHECK(analyzer::byte_count_name(240.0 * 1024 * 1024) == "240 MiB");
  CHECK(analyzer::byte_count_name(1023.5 * 1024) == "1 MiB");  // not "1.02e+03 KiB"
  CHECK(analyzer::byte_count_name(3.0 * 1024 * 1024 * 1024) == "3 GiB");
}
