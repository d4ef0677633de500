"""OpenAI's Decisions API (``POST /v1/decisions``) in dreads' terms, both ways. Pure: no I/O.

    request body --request.decision_from_request--> Decision (engine), its shapes kept
    job line     --lines.parse_decisions_line-----> Decision (a Batch line or a bare body)
    Answer       --answers.openai_answers---------> OpenAI answers, in question order
    Decision     --client.decisions_request-------> a request to another Decisions endpoint
    its response --client.read_decisions----------> EndpointAnswers (one draw per question)

One job per module: ``shapes`` (a question's typed OpenAI shape and what depends on it),
``model`` (the body's pydantic models, shared with the simulator), ``errors`` (pydantic's
errors as OpenAI's ``param`` and dreads' messages), ``request``, ``lines``, ``answers``,
``client``. Import from the modules: this package imports nothing, so that ``app.engine``,
stored decisions (``shapes``), answers and the client never load pydantic; only ``model``,
``errors``, ``request`` and ``lines`` do.
"""

__all__: list[str] = []
