# SPDX-License-Identifier: Apache-2.0
"""Each mutation of p4_mutations.json must make the P4 model test (or the test it names) fail.

A mutation is one change to one branch of the program (a RegisterAction's body, a table's
const entry, an apply block's condition), applied to a copy of p4/ by exact text replacement:
its `find` text must occur exactly once, so a mutation that no longer applies is an error, not a
silent pass. A mutation's file may also be the controller's (`controller/dpa_controller/...`,
which the copy holds too and the tests import from it). The model test (p4_model_test.py, or the file a mutation's "test" names, e.g.
p4_passes_test.py for the value passes) then runs on the copy (DPA_P4_DIR) and must end in an
assertion failure; an exception (the interpreter not reading the mutant) does not count. The
unmutated program passing is the switch_p4_model and switch_p4_passes tests. Standard library only.
"""
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
P4 = os.path.join(HERE, "..", "..", "p4")
MODEL_TEST = "p4_model_test.py"
PER_MUTATION_TIMEOUT_S = 300


def load_mutations():
    with open(os.path.join(HERE, "p4_mutations.json")) as f:
        return json.load(f)


def run_mutant(mutation):
    """(name, None) when the model test fails on the mutant, else (name, why it survived)."""
    with tempfile.TemporaryDirectory(prefix="dpa-p4-mutant-") as directory:
        copy = os.path.join(directory, "p4")
        shutil.copytree(P4, copy)
        path = os.path.join(copy, mutation["file"])
        with open(path) as f:
            source = f.read()
        occurrences = source.count(mutation["find"])
        if occurrences != 1:
            return mutation["name"], "its text occurs %d times in p4/%s" % (occurrences, mutation["file"])
        with open(path, "w") as f:
            f.write(source.replace(mutation["find"], mutation["replace"]))
        test = os.path.join(HERE, mutation.get("test", MODEL_TEST))
        result = subprocess.run([sys.executable, test, "-f"], env=dict(os.environ, DPA_P4_DIR=copy, DPA_P4_MODEL_STOP_AT_FIRST_FAILURE="1"),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                timeout=PER_MUTATION_TIMEOUT_S)
        if result.returncode == 0:
            return mutation["name"], "%s passed" % os.path.basename(test)
        if "failures=" not in result.stdout:
            return mutation["name"], "%s crashed instead of failing:\n%s" % (os.path.basename(test),
                                                                           result.stdout[-2000:])
        return mutation["name"], None


class MutationTest(unittest.TestCase):
    def test_every_mutation_fails_the_model_test(self):
        mutations = load_mutations()
        self.assertGreaterEqual(len(mutations), 40)
        self.assertEqual(len({m["name"] for m in mutations}), len(mutations), "mutation names repeat")
        workers = max(1, min(len(mutations), os.cpu_count() or 1))
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            outcomes = list(pool.map(run_mutant, mutations))
        survivors = ["%s: %s" % (name, why) for name, why in outcomes if why]
        self.assertEqual(survivors, [], "\n".join(survivors))


if __name__ == "__main__":
    unittest.main()
