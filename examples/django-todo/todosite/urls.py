"""django-todo's own routes under /todo/, and the site's health route (the lab's readiness poll
and a load balancer's send no cookie), and Django's own login view at /login/ (for
`lab run --login`)."""

from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.urls import include, path


def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok", content_type="text/plain")


urlpatterns = [
    path("health/", health),
    path("login/", auth_views.LoginView.as_view()),
    path("todo/", include("todo.urls")),
]
