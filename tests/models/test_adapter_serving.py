"""A learner's calls reach the server its model is on with the run's adapter: the gateway has the
server load it once, by vLLM's runtime LoRA API, and names it as the request's model (harness/models/
gateway.py, adapters.py). Tested against a stand-in that speaks that API; the local llama.cpp server
speaks it too (tests/models/test_adapter_server.py)."""

import asyncio

from aiohttp import web

from harness.bench.fake_chat import FakeChatServer
from harness.config import HarnessConfig
from harness.models.gateway import Gateway
from harness.models.model_client import AgentModelClient, ModelCallError, ServedAdapter
from tests.conftest import compose_config


class VllmStandIn(FakeChatServer):
    """vLLM's `POST /v1/load_lora_adapter` beside the chat endpoint: 400 "already been loaded" for a
    name it has, `load_status` for a new one."""

    def __init__(self, load_status: int = 200) -> None:
        super().__init__(latency_s=0.0, answer="Paris")
        self.load_status = load_status
        self.loads: list[dict] = []

    def app(self):
        app = super().app()
        app.router.add_post("/v1/load_lora_adapter", self._load)
        return app

    async def _load(self, request):
        body = await request.json()
        self.loads.append(body)
        if any(load["lora_name"] == body["lora_name"] for load in self.loads[:-1]):
            name = body["lora_name"]
            return web.Response(status=400, text=f"The lora adapter '{name}' has already been loaded.")
        return web.Response(status=self.load_status, text="Success" if self.load_status == 200 else "boom")


def client_for(server: VllmStandIn) -> AgentModelClient:
    model = HarnessConfig.from_dictconfig(compose_config(
        "model=litellm", "model.name=openai/served-base", f"model.api_base={server.api_base}",
        "model.max_retries=0")).model
    gateway = Gateway([model])
    return AgentModelClient(gateway, model=model.name, run_id="learner", model_endpoint=None)


ADAPTER = ServedAdapter(name="lora-abc", hash="abc" * 21 + "d", path="/runs/adapters/learner/abc")


def test_calls_with_an_adapter_name_it_and_the_server_loads_it_once():
    with VllmStandIn() as server:
        llm = client_for(server)

        async def calls():
            await llm.complete([{"role": "user", "content": "base?"}])
            llm.adapter = ADAPTER
            await asyncio.gather(*(llm.complete([{"role": "user", "content": f"q{i}"}]) for i in range(3)))

        asyncio.run(calls())
        assert [r["body"]["model"] for r in server.requests] == ["served-base"] + ["lora-abc"] * 3
        assert server.loads == [{"lora_name": "lora-abc", "lora_path": ADAPTER.path}]
        records = llm.take_records()
        assert [r.adapter for r in records] == [None] + [ADAPTER.hash] * 3


def test_an_adapter_the_server_will_not_load_is_the_calls_recorded_error():
    with VllmStandIn(load_status=500) as server:
        llm = client_for(server)
        llm.adapter = ADAPTER

        async def call():
            try:
                await llm.complete([{"role": "user", "content": "q"}])
            except ModelCallError as error:
                return error

        error = asyncio.run(call())
        assert error is not None and "did not load the LoRA adapter lora-abc" in str(error)
        [record] = llm.take_records()
        assert record.adapter == ADAPTER.hash and "HTTP 500" in record.error
        assert server.requests == []  # nothing answered without the adapter it asked for
