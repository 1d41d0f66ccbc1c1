"""Distributed training (the ESCHER slides): gang + co-location + anti-affinity between jobs.

Run:  python examples/esl_distributed_training.py

Two training jobs of two workers each. Each job is a gang (all workers start
together or none does), its workers are co-located (STRICT_PACK: they share
parameter updates), and the two jobs never share a node (one AntiAffinity
shared by both gangs). A third job that cannot fit times out cleanly:
nothing of it starts and nothing stays reserved.
"""

import time

import ray

import esl
from ray_adaptive import resources
from ray_adaptive.local_multinode import start_local_cluster



@ray.remote
class Worker:
    def __init__(self, job, rank):
        self.job, self.rank = job, rank

    def train_step(self):
        time.sleep(0.1)
        return self.job, self.rank, ray.get_runtime_context().get_node_id()


def main():
    lc = start_local_cluster(num_nodes=4, num_cpus=2)
    try:
        with esl.AntiAffinity() as jobs_apart:
            gangs = [
                esl.Gang([{"CPU": 1}] * 2, strategy="STRICT_PACK", anti_affinity=jobs_apart, timeout_s=30)
                for _ in range(2)
            ]
            workers = []
            for job, gang in enumerate(gangs):
                t0 = time.perf_counter()
                gang.reserve()
                workers += [gang.submit(rank, Worker, job, rank) for rank in range(2)]
                print(f"job {job}: gang reserved on {gang.nodes[0][:12]} in {1e3 * (time.perf_counter() - t0):.1f} ms")
            for job, rank, node in ray.get([w.train_step.remote() for w in workers]):
                print(f"job {job} worker {rank} ran on node {node[:12]}")
            # A job of 4 workers x 2 CPUs on one node cannot fit anywhere.
            too_big = esl.Gang([{"CPU": 2}] * 4, strategy="STRICT_PACK", timeout_s=1.0)
            try:
                too_big.reserve()
            except esl.GangTimeoutError as err:
                print("job 2:", str(err).split(";")[0], "-> nothing started, nothing held")
            for w in workers:
                ray.kill(w)
            for gang in gangs:
                gang.release()
        resources.wait_for_pending(10)
        print("left behind:", resources.created_resources() or "nothing")
    finally:
        lc.shutdown()


if __name__ == "__main__":
    main()
