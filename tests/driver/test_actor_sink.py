"""An agent worker's row sink (harness/driver/actors.py `ActorSink`), shared by every job the worker
serves: a job's drain returns only once its rows have reached the writer hub, whatever another job's
drain did meanwhile."""

import asyncio

from harness.driver.actors import ActorSink


class SlowHub:
    """A hub whose append_many calls arrive after `delay_s` each, recording what arrived."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s, self.arrived = delay_s, []

        class AppendMany:
            @staticmethod
            def remote(batch):
                return asyncio.ensure_future(self._arrive(batch))

        self.append_many = AppendMany()

    async def _arrive(self, batch):
        await asyncio.sleep(self.delay_s)
        self.arrived.extend(batch)


def test_two_jobs_draining_at_once_each_wait_for_their_own_rows():
    async def scenario():
        hub = SlowHub(delay_s=0.2)
        sink = ActorSink(hub)
        sink.append("job-a", "episodes", [{"episode_id": "a/0"}])
        sink._send()  # job a's rows are on their way
        sink.append("job-b", "episodes", [{"episode_id": "b/0"}])
        arrived_at_drain_end = {}

        async def drain(job):
            await sink.drain()
            arrived_at_drain_end[job] = set(hub.arrived)

        await asyncio.gather(drain("job-a"), drain("job-b"))
        return arrived_at_drain_end

    ends = asyncio.run(scenario())
    assert ends == {"job-a": {"job-a", "job-b"}, "job-b": {"job-a", "job-b"}}
