// SPDX-License-Identifier: Apache-2.0
#include "transport/transport_json.hpp"

#include <fmt/format.h>

namespace dpa::detail {
namespace {

void read_strings(const json& value, const std::string& where, std::vector<std::string>& out) {
  require_array(value, where);
  out.clear();
  for (std::size_t i = 0; i < value.size(); ++i) {
    std::string item;
    read_json(value[i], fmt::format("{}[{}]", where, i), item);
    out.push_back(std::move(item));
  }
}

const FieldReaders<UdpTransportConfig>& udp_readers() {
  static const FieldReaders<UdpTransportConfig> readers{
      {"bind_host", reader_for(&UdpTransportConfig::bind_host)},
      {"bind_port", reader_for(&UdpTransportConfig::bind_port)},
      {"max_payload", reader_for(&UdpTransportConfig::max_payload)},
      {"batch", reader_for(&UdpTransportConfig::batch)},
      {"buffers", reader_for(&UdpTransportConfig::buffers)},
      {"socket_buffer_bytes", reader_for(&UdpTransportConfig::socket_buffer_bytes)},
  };
  return readers;
}

const FieldReaders<ShmTransportConfig>& shm_readers() {
  static const FieldReaders<ShmTransportConfig> readers{
      {"fabric", reader_for(&ShmTransportConfig::fabric)},
      {"directory", reader_for(&ShmTransportConfig::directory)},
      {"base_port", reader_for(&ShmTransportConfig::base_port)},
      {"max_payload", reader_for(&ShmTransportConfig::max_payload)},
      {"buffers", reader_for(&ShmTransportConfig::buffers)},
      {"ring", reader_for(&ShmTransportConfig::ring)},
  };
  return readers;
}

const FieldReaders<DpdkNeighbour>& neighbour_readers() {
  static const FieldReaders<DpdkNeighbour> readers{
      {"ip", reader_for(&DpdkNeighbour::ip)},
      {"mac", reader_for(&DpdkNeighbour::mac)},
  };
  return readers;
}

const FieldReaders<DpdkTransportConfig>& dpdk_readers() {
  using C = DpdkTransportConfig;
  static const FieldReaders<C> readers{
      {"cores", reader_for(&C::cores)},
      {"allow", [](const json& v, const std::string& w, C& c) { read_strings(v, w, c.allow); }},
      {"vdevs", [](const json& v, const std::string& w, C& c) { read_strings(v, w, c.vdevs); }},
      {"file_prefix", reader_for(&C::file_prefix)},
      {"no_huge", reader_for(&C::no_huge)},
      {"memory_mb", reader_for(&C::memory_mb)},
      {"eal_args", [](const json& v, const std::string& w, C& c) { read_strings(v, w, c.eal_args); }},
      {"ports", [](const json& v, const std::string& w, C& c) { read_strings(v, w, c.ports); }},
      {"local_ip", reader_for(&C::local_ip)},
      {"local_port", reader_for(&C::local_port)},
      {"neighbours",
       [](const json& value, const std::string& where, C& config) {
         require_array(value, where);
         config.neighbours.clear();
         for (std::size_t i = 0; i < value.size(); ++i) {
           const std::string item = fmt::format("{}[{}]", where, i);
           require_object(value[i], item);
           DpdkNeighbour neighbour;
           read_object(value[i], item + ".", neighbour_readers(), neighbour);
           config.neighbours.push_back(std::move(neighbour));
         }
       }},
      {"mtu", reader_for(&C::mtu)},
      {"queues", reader_for(&C::queues)},
      {"rx_descriptors", reader_for(&C::rx_descriptors)},
      {"tx_descriptors", reader_for(&C::tx_descriptors)},
      {"mbufs", reader_for(&C::mbufs)},
      {"burst", reader_for(&C::burst)},
      {"tx_flush_us", reader_for(&C::tx_flush)},
      {"flow_steering", reader_for(&C::flow_steering)},
      {"checksum_offload", reader_for(&C::checksum_offload)},
      {"check_udp_checksum", reader_for(&C::check_udp_checksum)},
      {"software_udp_checksum", reader_for(&C::software_udp_checksum)},
      {"monitor", reader_for(&C::monitor)},
      {"monitor_interval_us", reader_for(&C::monitor_interval)},
      {"monitor_output", reader_for(&C::monitor_output)},
  };
  return readers;
}

}  // namespace

void require_one_transport_section(const json& root, const std::string& where) {
  std::string given;
  for (const char* key : {"udp", "dpdk", "shm"}) {
    if (root.contains(key)) given += given.empty() ? key : fmt::format(", {}", key);
  }
  if (given.find(',') != std::string::npos) {
    fail(fmt::format("{}{}: give one transport section, not several", where, given));
  }
}

void read_transport_section(const json& value, const std::string& where, const std::string& key,
                            TransportConfig& transport) {
  require_object(value, where);
  // Keys left out keep the holder's defaults for that transport (the switch's differ from a
  // worker's); a section of the other transport starts from that transport's defaults.
  if (key == "udp") {
    if (!std::holds_alternative<UdpTransportConfig>(transport)) transport = UdpTransportConfig{};
    read_object(value, where + ".", udp_readers(), std::get<UdpTransportConfig>(transport));
  } else if (key == "shm") {
    if (!std::holds_alternative<ShmTransportConfig>(transport)) transport = ShmTransportConfig{};
    read_object(value, where + ".", shm_readers(), std::get<ShmTransportConfig>(transport));
  } else {
    if (!std::holds_alternative<DpdkTransportConfig>(transport)) transport = DpdkTransportConfig{};
    read_object(value, where + ".", dpdk_readers(), std::get<DpdkTransportConfig>(transport));
  }
}

}  // namespace dpa::detail
