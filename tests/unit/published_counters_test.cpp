// SPDX-License-Identifier: Apache-2.0
// PublishedCounters: a reader on another thread sees whole publications, never a mix of two, and
// never goes back; add_to_counter's single-writer increments all arrive.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <thread>

#include "switch/published_counters.hpp"

namespace {

struct Words {
  std::array<std::uint64_t, 35> values{};  // as many words as SwitchThreadCounters
};

TEST(PublishedCounters, ReadersSeeWholePublicationsInOrder) {
  constexpr std::uint64_t kPublications = 1'000'000;
  dpa::sw::PublishedCounters<Words> published;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    Words words;
    for (std::uint64_t i = 1; i <= kPublications; ++i) {
      words.values.fill(i);
      published.publish(words);
    }
    done.store(true);
  });
  std::uint64_t last = 0;
  std::uint64_t torn = 0;
  std::uint64_t backwards = 0;
  for (bool finished = false; !finished;) {
    finished = done.load();  // one more read after the writer's last publication
    const Words seen = published.read();
    for (const std::uint64_t value : seen.values) torn += value != seen.values[0] ? 1 : 0;
    backwards += seen.values[0] < last ? 1 : 0;
    last = seen.values[0];
  }
  writer.join();
  EXPECT_EQ(torn, 0u);
  EXPECT_EQ(backwards, 0u);
  EXPECT_EQ(last, kPublications);
}

TEST(PublishedCounters, SingleWriterIncrementsAllArrive) {
  std::uint64_t counter = 0;
  std::thread writer([&] {
    for (int i = 0; i < 100'000; ++i) dpa::sw::add_to_counter(counter, 2);
  });
  std::uint64_t last = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::uint64_t seen = dpa::sw::read_counter(counter);
    EXPECT_GE(seen, last);
    last = seen;
  }
  writer.join();
  EXPECT_EQ(dpa::sw::read_counter(counter), 200'000u);
}

}  // namespace
