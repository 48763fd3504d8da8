"""The playground: a page to hear the server, served by the server itself."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse, RedirectResponse

router = APIRouter(include_in_schema=False)

PAGE_DIR = Path(__file__).parent / "playground"
_FILES = {
    "index.html": "text/html",
    "playground.js": "text/javascript",
    "playground.css": "text/css",
}


@router.get("/")
async def root():
    return RedirectResponse("/playground/")


@router.get("/playground")
async def playground_no_slash():
    return RedirectResponse("/playground/")


@router.get("/playground/{name:path}")
async def playground(name: str):
    name = name or "index.html"
    if name not in _FILES:
        raise HTTPException(404)
    return FileResponse(
        PAGE_DIR / name, media_type=_FILES[name], headers={"Cache-Control": "no-cache"}
    )
