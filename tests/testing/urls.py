from django.urls import path

from tests.testing import tasks_project

urlpatterns = [path("signup/", tasks_project.signup), path("approve/<str:job_id>/", tasks_project.approve)]
