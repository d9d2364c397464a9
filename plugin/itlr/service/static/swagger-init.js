// Swagger UI over this service's schema. validatorUrl null: the default sends the schema to
// validator.swagger.io for a badge, a request to the outside the page must never make.
"use strict";
window.ui = SwaggerUIBundle({
  url: "openapi.json",
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis],
});
