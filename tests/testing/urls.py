from django.urls import path

from tests.testing import tasks_project

urlpatterns = [path("signup/", tasks_project.signup)]
