"""The project's routes: its login (Django's own LoginView), a page and a write behind it, and
`/seen/`, how many distinct sessions the logged-in routes saw."""

from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.http import require_POST

SEEN: set[str] = set()


def health(_: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@login_required
def me(request: HttpRequest) -> JsonResponse:
    SEEN.add(str(request.session.session_key))
    return JsonResponse({"user": request.user.get_username()})


@require_POST
@login_required
def notes(request: HttpRequest) -> JsonResponse:
    SEEN.add(str(request.session.session_key))
    return JsonResponse({"saved": True}, status=201)


def seen(_: HttpRequest) -> JsonResponse:
    return JsonResponse({"sessions": len(SEEN)})


urlpatterns = [
    path("health/", health),
    path("accounts/login/", LoginView.as_view(template_name="login.html")),
    path("me/", me),
    path("notes/", notes),
    path("seen/", seen),
]
