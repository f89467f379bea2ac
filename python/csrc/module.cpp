// SPDX-License-Identifier: Apache-2.0
// dpa._C: the Python face of the backend. dpa/__init__.py registers it with torch.distributed.
#include <algorithm>
#include <bit>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/python.h>

#include "c10d/process_group_dpa.hpp"
#include "cuda/cuda_arch_check.hpp"
#include "run/fastest_k.hpp"

namespace py = pybind11;
using dpa::torch_backend::BackendBase;
using dpa::torch_backend::FastestK;
using dpa::torch_backend::ProcessGroupDpa;

namespace {

py::object stats_to_dict(const std::optional<dpa::OpStats>& stats) {
  if (!stats) return py::none();
  py::list missed;
  for (const dpa::ElementRange& range : stats->missed)
    missed.append(py::make_tuple(range.begin, range.end));
  py::dict result;
  result["blocks"] = stats->blocks;
  result["blocks_full"] = stats->blocks_full;
  result["blocks_partial"] = stats->blocks_partial;
  result["blocks_missed"] = stats->blocks_missed;
  result["blocks_non_finite"] = stats->blocks_non_finite;
  result["contributed"] = stats->contributed;
  result["retransmissions"] = stats->retransmissions;
  result["timeouts"] = stats->timeouts;
  result["syn_probes"] = stats->syn_probes;
  result["replies_rejected"] = stats->replies_rejected;
  result["min_contributors"] = stats->min_contributors;
  result["missed"] = missed;
  result["seconds"] = stats->seconds;
  return result;
}

py::dict totals_to_dict(const dpa::torch_backend::OpTotals& totals) {
  const dpa::OpStats& sum = totals.stats;
  py::dict result;
  result["operations"] = totals.operations;
  result["blocks"] = sum.blocks;
  result["blocks_full"] = sum.blocks_full;
  result["blocks_partial"] = sum.blocks_partial;
  result["blocks_missed"] = sum.blocks_missed;
  result["blocks_non_finite"] = sum.blocks_non_finite;
  result["blocks_out_of_range"] = sum.blocks_out_of_range;
  result["contributed"] = sum.contributed;
  result["retransmissions"] = sum.retransmissions;
  result["timeouts"] = sum.timeouts;
  result["syn_probes"] = sum.syn_probes;
  result["replies_rejected"] = sum.replies_rejected;
  result["seconds"] = sum.seconds;
  return result;
}

// SwitchCounters' own "name value" lines, so the names are the switch's (dpa-switch --stats).
// Read with from_chars, not an istream: under torch 2.11 from PyPI an istream's number
// extraction in this module read nothing and did not fail, so every counter came out as 0.
py::object counters_to_dict(const std::optional<dpa::SwitchCounters>& counters) {
  if (!counters) return py::none();
  py::dict result;
  const std::string text = counters->to_string();
  for (std::string_view rest = text; !rest.empty();) {
    const std::size_t line_end = std::min(rest.find('\n'), rest.size());
    const std::string_view line = rest.substr(0, line_end);
    rest.remove_prefix(std::min(line_end + 1, rest.size()));
    const std::size_t space = std::min(line.find(' '), line.size());
    std::uint64_t value = 0;
    const auto [end, error] = std::from_chars(line.data() + std::min(space + 1, line.size()),
                                              line.data() + line.size(), value);
    if (space == line.size() || error != std::errc{} || end != line.data() + line.size()) {
      throw std::logic_error("switch counter line \"" + std::string(line) + "\" is not \"name value\"");
    }
    result[py::str(std::string(line.substr(0, space)))] = value;
  }
  return result;
}

py::tuple choice_to_tuple(const FastestK& choice) {
  return py::make_tuple(choice.k, choice.preemptive);
}

}  // namespace

PYBIND11_MODULE(_C, module) {
  module.doc() = "dpa in-network allreduce: the torch.distributed backend";
  // The base class's Python type must be registered before ours derives from it.
  py::module_::import("torch.distributed");

  module.attr("TORCH_VERSION") = TORCH_VERSION;
  module.attr("TORCH_VERSION_MAJOR") = TORCH_VERSION_MAJOR;
  module.attr("TORCH_VERSION_MINOR") = TORCH_VERSION_MINOR;
  module.attr("CXX11_ABI") = static_cast<bool>(_GLIBCXX_USE_CXX11_ABI);
  // The CUDA kernels' architectures ("" without them) and the rule that checks a GPU against them.
  module.attr("CUDA_ARCHITECTURES") = std::string(dpa::torch_backend::built_cuda_architectures());
  module.def("cuda_architectures_cover", &dpa::torch_backend::cuda_architectures_cover,
             py::arg("architectures"), py::arg("major"), py::arg("minor"));

  py::class_<ProcessGroupDpa, BackendBase, c10::intrusive_ptr<ProcessGroupDpa>>(module,
                                                                                "ProcessGroupDpa")
      .def(py::init<const c10::intrusive_ptr<c10d::Store>&, int, int, std::chrono::milliseconds,
                    c10::intrusive_ptr<BackendBase>>(),
           py::arg("store"), py::arg("rank"), py::arg("world_size"), py::arg("timeout"),
           py::arg("gloo"), py::call_guard<py::gil_scoped_release>())
      .def("close", &ProcessGroupDpa::close, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("mode", &ProcessGroupDpa::mode)
      .def_property_readonly("payload", &ProcessGroupDpa::payload)
      .def("payload_for", &ProcessGroupDpa::payload_for, py::arg("elements"))
      .def_property_readonly("sizing", &ProcessGroupDpa::sizing)
      .def_property_readonly("switch_address", &ProcessGroupDpa::switch_address)
      .def_property_readonly("embeds_switch", &ProcessGroupDpa::embeds_switch)
      .def_property_readonly("switch_counters",
                             [](const ProcessGroupDpa& group) { return counters_to_dict(group.switch_counters()); })
      .def_property_readonly("authenticated", &ProcessGroupDpa::authenticated);

  module.def("close_all", &ProcessGroupDpa::close_all, py::call_guard<py::gil_scoped_release>());
  module.def("embedded_switch_counters",
             [] { return counters_to_dict(ProcessGroupDpa::embedded_switch_totals()); });

  module.def(
      "set_thread_fastest_k",
      [](std::optional<int> k, std::optional<bool> preemptive) {
        dpa::torch_backend::set_thread_fastest_k({k, preemptive});
      },
      py::arg("k"), py::arg("preemptive"));
  module.def("thread_fastest_k",
             [] { return choice_to_tuple(dpa::torch_backend::thread_fastest_k()); });
  module.def(
      "set_default_fastest_k",
      [](std::optional<int> k, std::optional<bool> preemptive) {
        dpa::torch_backend::set_default_fastest_k({k, preemptive});
      },
      py::arg("k"), py::arg("preemptive"));
  module.def("default_fastest_k",
             [] { return choice_to_tuple(dpa::torch_backend::default_fastest_k()); });
  module.def("last_stats", [] { return stats_to_dict(dpa::torch_backend::last_stats()); });
  module.def("pending", []() -> py::object {
    const std::optional<dpa::PendingWait> wait = ProcessGroupDpa::pending_all();
    if (!wait) return py::none();
    py::list ranks;
    for (std::uint64_t rest = wait->waiting_for; rest != 0; rest &= rest - 1) ranks.append(std::countr_zero(rest));
    py::dict result;
    result["op_id"] = wait->op_id;
    result["waited_s"] = static_cast<double>(wait->waited_ms) / 1000.0;
    result["ranks"] = ranks;
    return result;
  });
  module.def("total_retransmissions", &dpa::torch_backend::total_retransmissions);
  module.def("total_stats", [] { return totals_to_dict(dpa::torch_backend::total_stats()); });
}
