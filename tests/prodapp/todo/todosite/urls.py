"""django-todo's own routes under /todo/, and the site's health route (the lab's readiness poll
and a load balancer's send no cookie)."""

from django.http import HttpRequest, HttpResponse
from django.urls import include, path


def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok", content_type="text/plain")


urlpatterns = [path("health/", health), path("todo/", include("todo.urls"))]
