"""The server's live page: `GET /` to type English and see the translation, its n-best list and attention.

The page (`page/index.html`, `page/page.js`, `page/page.css`, shipped in the
package: no build step, no CDN) talks to the server only through its REST API:

* `GET /statz` for the model name, `GET /v1/models/NAME/metadata` for the
  decoding defaults and the largest beam size;
* `POST /v1/models/NAME:predict` with `"signature_name": "translate"` and
  `"num_return"` for the translations and their n-best lists with scores;
* `POST /v1/models/NAME:attention` (see `attention_api`) for the
  encoder-decoder attention of the chosen hypothesis, drawn as a heatmap of a
  chosen layer and head (or the mean over heads) over the output and source
  tokens.

The heatmap uses the style sheet of `inspect`'s HTML view (served as
`/static/inspect.css`), so both pages draw attention alike; a link opens that
view itself for the chosen pair (`GET /attention`, see `server`). URLs in the
page are relative, so a proxy may serve it under a path prefix.
"""

import importlib.resources

from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from t2t_keras.inspect import html_view

PACKAGE, DIRECTORY = "t2t_keras.serving", "page"


def page_routes():
    """The routes of the page: `/`, `/static/inspect.css` and the files of `page/` under `/static/`."""
    return [
        Route("/", _index, methods=["GET"]),
        Route("/static/inspect.css", _inspect_css, methods=["GET"]),
        Mount("/static", StaticFiles(packages=[(PACKAGE, DIRECTORY)]), name="static"),
    ]


def page_file(name):
    """The text of one of the page's files, e.g. `page_file("index.html")`."""
    return importlib.resources.files(PACKAGE).joinpath(DIRECTORY, name).read_text(encoding="utf-8")


async def _index(request):
    return HTMLResponse(page_file("index.html"))


async def _inspect_css(request):
    return Response(html_view.CSS, media_type="text/css")
